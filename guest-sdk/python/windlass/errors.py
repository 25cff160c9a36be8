"""Why a plugin could not produce an output: one exception per `plugin-error` variant."""


class Error(Exception):
    """A plugin error the host understands. Raise one of the subclasses."""

    #: The WIT variant this error becomes (`invalid-parent`, `invalid-config`, `failed`).
    variant = "failed"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = str(message)

    def __str__(self) -> str:
        return self.message

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.message == other.message

    def __hash__(self) -> int:
        return hash((type(self), self.message))


class InvalidParent(Error):
    """The parent's spec cannot be acted on; say which field and why."""

    variant = "invalid-parent"


class InvalidConfig(Error):
    """The plugin's config cannot be used; say which key and why."""

    variant = "invalid-config"


class Failed(Error):
    """Anything else; the host retries with backoff."""

    variant = "failed"


def as_error(e: BaseException) -> Error:
    """`e` as an SDK error: itself, or `Failed("TypeName: message")` for any other exception
    (a bug or an input of an unexpected shape; the host retries)."""
    if isinstance(e, Error):
        return e
    return Failed(f"{type(e).__name__}: {e}")
