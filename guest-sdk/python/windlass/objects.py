"""Identity of Kubernetes objects held as dicts."""


def kind_of(obj) -> str:
    """`apiVersion/kind` of an object (`v1/Pod`, `apps/v1/StatefulSet`), or "" when it has none."""
    if not isinstance(obj, dict):
        return ""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ""
    return f"{api_version}/{kind}"


def name_of(obj):
    """`metadata.name` of an object, or None."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else None


def is_object(obj, kind: str, name: str) -> bool:
    """True when `obj` is of `kind` (`group/version/Kind`) and named `name`."""
    return kind_of(obj) == kind and name_of(obj) == name
