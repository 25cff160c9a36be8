//! Write [Windlass](https://github.com/windlass-dev/windlass) plugins in Rust.
//!
//! A plugin is a type implementing [`Plugin`], exported with [`export!`] and built for
//! `wasm32-wasip2`. It receives the parent custom resource, what the host observed and what
//! earlier plugins want, and returns the desired objects, a status fragment, conditions and
//! events. The host applies nothing a plugin returns before checking it.
//!
//! ```
//! use windlass_sdk::{Context, Info, Output, Plugin, Result};
//! use windlass_sdk::k8s_openapi::api::core::v1::ConfigMap;
//!
//! /// Publishes the parent's `spec.greeting` in a ConfigMap.
//! struct Greeter;
//!
//! #[derive(serde::Deserialize)]
//! struct Spec {
//!     greeting: String,
//! }
//!
//! impl Plugin for Greeter {
//!     fn info() -> Info {
//!         Info::new("greeter", "0.1.0")
//!             .parent("example.com/v1/Greeting")
//!             .child::<ConfigMap>()
//!     }
//!
//!     fn reconcile(ctx: &Context) -> Result<Output> {
//!         let spec: Spec = ctx.spec()?;
//!         let mut out = ctx.output();
//!         let mut cm = ConfigMap::default();
//!         cm.metadata.name = Some(format!("{}-greeting", ctx.name()));
//!         cm.data = Some([("greeting".to_string(), spec.greeting)].into());
//!         out.apply(&cm)?;
//!         out.status("published", true);
//!         Ok(out)
//!     }
//! }
//!
//! // In the plugin crate: `windlass_sdk::export!(Greeter);` (it exports only on wasm32).
//!
//! // Unit tests run natively, without a wasm runtime:
//! let out = windlass_sdk::testing::Harness::from_yaml(
//!     "apiVersion: example.com/v1\nkind: Greeting\nmetadata: {name: hi, namespace: demo}\nspec: {greeting: hello}",
//! )
//! .run::<Greeter>()
//! .unwrap();
//! assert_eq!(out.find("v1/ConfigMap", "hi-greeting").unwrap()["data"]["greeting"], "hello");
//! ```
#![deny(missing_docs)]

mod context;
pub mod jobs;
mod output;
pub mod testing;

#[doc(hidden)]
pub mod __private;

pub use context::{Context, Phase};
#[cfg(feature = "k8s")]
pub use k8s_openapi;
pub use output::{Condition, Event, Output};
pub use serde_json::{self, Value, json};

/// What a plugin declares about itself; the host refuses output beyond it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Info {
    /// A short DNS-1123 label naming the plugin.
    pub name: String,
    /// The plugin's version (semver).
    pub version: String,
    /// Parent kinds, as `group/version/Kind`.
    pub parent_kinds: Vec<String>,
    /// Kinds the plugin produces, as `group/version/Kind`.
    pub child_kinds: Vec<String>,
    /// Kinds the plugin only reads.
    pub reads_kinds: Vec<String>,
    /// True when the plugin has cleanup to do in the finalize phase.
    pub finalizes: bool,
}

impl Info {
    /// A plugin called `name` at `version`, declaring nothing yet.
    pub fn new(name: &str, version: &str) -> Self {
        Info {
            name: name.to_string(),
            version: version.to_string(),
            ..Info::default()
        }
    }

    /// Adds a parent kind (`group/version/Kind`).
    pub fn parent(mut self, kind: &str) -> Self {
        self.parent_kinds.push(kind.to_string());
        self
    }

    /// Adds a child kind by its k8s-openapi type.
    #[cfg(feature = "k8s")]
    pub fn child<K: k8s_openapi::Resource>(self) -> Self {
        self.child_kind(&kind_key::<K>())
    }

    /// Adds a child kind (`group/version/Kind`).
    pub fn child_kind(mut self, kind: &str) -> Self {
        self.child_kinds.push(kind.to_string());
        self
    }

    /// Adds a kind to read by its k8s-openapi type.
    #[cfg(feature = "k8s")]
    pub fn reads<K: k8s_openapi::Resource>(self) -> Self {
        self.reads_kind(&kind_key::<K>())
    }

    /// Adds a kind to read (`group/version/Kind`).
    pub fn reads_kind(mut self, kind: &str) -> Self {
        self.reads_kinds.push(kind.to_string());
        self
    }

    /// Declares that the plugin has cleanup to do when the parent is deleted.
    pub fn finalizes(mut self) -> Self {
        self.finalizes = true;
        self
    }
}

/// `group/version/Kind` of a k8s-openapi type.
#[cfg(feature = "k8s")]
pub fn kind_key<K: k8s_openapi::Resource>() -> String {
    format!("{}/{}", K::API_VERSION, K::KIND)
}

/// Why a plugin could not produce an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The parent's spec cannot be acted on; say which field and why.
    InvalidParent(String),
    /// The plugin's config cannot be used; say which key and why.
    InvalidConfig(String),
    /// Anything else; the host retries with backoff.
    Failed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::InvalidParent(m) => write!(f, "invalid parent: {m}"),
            Error::InvalidConfig(m) => write!(f, "invalid config: {m}"),
            Error::Failed(m) => write!(f, "failed: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// Result of plugin operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A plugin: reconcile logic for one concern of an operator.
pub trait Plugin {
    /// Describes the plugin. Must not depend on any input.
    fn info() -> Info;

    /// Computes what should exist for the parent.
    fn reconcile(ctx: &Context) -> Result<Output>;

    /// Cleans up when the parent is being deleted; report [`Output::finalized`] when done.
    /// The default has nothing to clean up.
    fn finalize(ctx: &Context) -> Result<Output> {
        let mut out = ctx.output();
        out.finalized(true);
        Ok(out)
    }

    /// Checks the plugin's config (from its WasmPlugin; `{}` when none) before the version
    /// serves: the host calls it when it loads the plugin or the config changes, and refuses
    /// the version (the WasmPlugin's `Ready` false, `InvalidConfig`, with this message) on an
    /// error, so a bad config is seen where it is written, not at the first parent.
    /// [`Error::InvalidConfig`] naming the key. The default accepts any config.
    ///
    /// Check here what [`Context::config`] would refuse and what `reconcile` would refuse of
    /// the config alone; the same checks usually serve both.
    fn validate_config(config: &Value) -> Result<()> {
        let _ = config;
        Ok(())
    }
}

/// Logging into the host's log, tagged with the plugin's name. Natively (in unit tests) the
/// lines go to stderr.
pub mod log {
    /// A debug line.
    pub fn debug(message: impl AsRef<str>) {
        crate::__private::log(0, message.as_ref());
    }
    /// An info line.
    pub fn info(message: impl AsRef<str>) {
        crate::__private::log(1, message.as_ref());
    }
    /// A warning.
    pub fn warn(message: impl AsRef<str>) {
        crate::__private::log(2, message.as_ref());
    }
    /// An error.
    pub fn error(message: impl AsRef<str>) {
        crate::__private::log(3, message.as_ref());
    }
}

/// Exports a [`Plugin`] as the component's `windlass:plugin/reconciler`. Invoke it once, in
/// the plugin's crate; it exports only when building for wasm32, so the same crate still links
/// natively in tests:
///
/// ```ignore
/// windlass_sdk::export!(MyPlugin);
/// ```
#[macro_export]
macro_rules! export {
    ($plugin:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            $crate::__export_for_wasm!($plugin);
        };
    };
}

/// What [`export!`] expands to on wasm32.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_for_wasm {
    ($plugin:ty) => {
        struct __WindlassExport;

        impl $crate::__private::Guest for __WindlassExport {
            fn info() -> $crate::__private::PluginInfo {
                $crate::__private::info::<$plugin>()
            }

            fn reconcile(
                req: $crate::__private::Request,
            ) -> ::core::result::Result<$crate::__private::Response, $crate::__private::PluginError> {
                $crate::__private::reconcile::<$plugin>(req)
            }
        }

        impl $crate::__private::ConfigGuest for __WindlassExport {
            fn validate(config: ::std::string::String) -> ::core::result::Result<(), ::std::string::String> {
                $crate::__private::validate_config::<$plugin>(&config)
            }
        }

        $crate::__private::export_bindings!(__WindlassExport with_types_in $crate::__private::bindings);
    };
}
