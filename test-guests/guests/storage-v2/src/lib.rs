//! A new version of the SampleDB storage plugin, for replaying a recorded call against a
//! changed plugin (host/tests/host/replay.rs): the same name and the same objects, each with
//! one more label, `samples.windlass.dev/storage-version: "2"`.

use windlass_sdk::{Context, Info, Output, Plugin, Result, Value};

use sampledb_storage::Storage;

/// The storage plugin, version 2.
pub struct StorageV2;

windlass_sdk::export!(StorageV2);

/// `out` with the version label on every object.
fn labelled(mut out: Output) -> Output {
    for object in out.desired_mut() {
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            let labels = meta
                .entry("labels")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(labels) = labels.as_object_mut() {
                labels.insert(
                    "samples.windlass.dev/storage-version".into(),
                    Value::String("2".into()),
                );
            }
        }
    }
    out
}

impl Plugin for StorageV2 {
    fn info() -> Info {
        Storage::info()
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        Storage::reconcile(ctx).map(labelled)
    }

    fn finalize(ctx: &Context) -> Result<Output> {
        Storage::finalize(ctx).map(labelled)
    }
}
