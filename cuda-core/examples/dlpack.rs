//! DLPack: lend a device buffer as a DLPack tensor, take it back as a consumer would, and check
//! what arrives: device, data type, shape, strides, address and contents. Then the same through
//! the unversioned ABI, and a view of the wrong type, which is refused.
//!
//! ```sh
//! cargo run --example dlpack
//! ```

use cuhost::dlpack::{DLDeviceType, DlpackDtype, ImportedTensor, ManagedTensor};
use cuhost::{Context, Device, DeviceBuffer, Error, Stream};
use std::process::ExitCode;

fn main() -> ExitCode {
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run().and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dlpack: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fails the example with `message` unless `ok`.
fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("dlpack example", message)) }
}

fn run() -> cuhost::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let host: Vec<f32> = (0..24).map(|i| i as f32 * 0.25).collect();
    let buf = DeviceBuffer::from_slice(&Stream::legacy(&ctx), &host)?;
    let address = buf.as_raw();

    // The buffer moves into the tensor; a 4x6 row-major layout over its 24 elements.
    let tensor = ManagedTensor::from_buffer_with_shape(buf, &[4, 6], None)?;
    println!("exported   {tensor:?}");
    let raw = tensor.into_raw();

    // What a consumer (PyTorch, CuPy, ...) receives; here we are the consumer.
    // SAFETY: `raw` was handed over just above, to this importer only.
    let imported = unsafe { ImportedTensor::from_raw(raw)? };
    let device = imported.device();
    check(device.device_type == DLDeviceType::kDLCUDA, format!("device type {}", device.device_type))?;
    check(
        usize::try_from(device.device_id).ok() == Some(ctx.device().ordinal()),
        format!("device id {}", device.device_id),
    )?;
    check(imported.dtype() == f32::DTYPE, format!("dtype {}", imported.dtype()))?;
    check(imported.shape() == [4, 6], format!("shape {:?}", imported.shape()))?;
    check(imported.strides() == Some(&[6, 1][..]), format!("strides {:?}", imported.strides()))?;
    let view = imported.view::<f32>(&ctx)?;
    check(view.as_raw() == address, "the view is not at the buffer's address")?;
    check(view.to_vec()? == host, "the contents differ")?;
    println!(
        "imported   DLPack {:?}, {} on device {}, {} {:?}, strides {:?}: {} elements read back equal",
        imported.version(),
        device.device_type,
        device.device_id,
        imported.dtype(),
        imported.shape(),
        imported.strides().unwrap_or_default(),
        view.len()
    );
    match imported.view::<i32>(&ctx) {
        Err(e) => println!("as i32     refused: {e}"),
        Ok(_) => return Err(Error::invalid("dlpack example", "a float32 tensor was viewed as i32")),
    }
    drop(imported);
    println!("dropped    the deleter ran and freed the buffer");

    // The unversioned ABI, for consumers from before DLPack 1.0.
    let buf = DeviceBuffer::from_slice(&Stream::legacy(&ctx), &[7u8; 16])?;
    let raw = ManagedTensor::from_buffer(buf)?.into_raw_legacy();
    // SAFETY: handed over just above, to this importer only.
    let imported = unsafe { ImportedTensor::from_raw_legacy(raw)? };
    check(imported.view::<u8>(&ctx)?.to_vec()? == [7u8; 16], "the unversioned tensor's contents differ")?;
    println!("unversioned {} {:?} read back equal", imported.dtype(), imported.shape());
    Ok(())
}
