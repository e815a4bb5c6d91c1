//! The guide's error chapter shows the texts the crate really prints: each error here is made
//! the way the library makes it, and the chapter must contain its `Display` text exactly.

#![forbid(unsafe_code)]

use super::Error;
use crate::device::Device;
use crate::memory::{range_of, same_len};
use crate::module::ParamLayout;
use cuhost_driver_sys as sys;

const CHAPTER: &str = include_str!("../../../../docs/src/errors.md");

fn shown(error: &Error) -> Result<(), String> {
    let text = error.to_string();
    if CHAPTER.contains(&text) { Ok(()) } else { Err(format!("docs/src/errors.md does not show `{text}`")) }
}

fn refusal(result: crate::error::Result<impl std::fmt::Debug>) -> Result<Error, String> {
    match result {
        Err(e) => Ok(e),
        Ok(v) => Err(format!("expected an error, got {v:?}")),
    }
}

#[test]
fn launch_argument_mismatches() -> Result<(), String> {
    // saxpy(u32 n, f32 a, const f32* x, f32* y), as `Function::launch` checks it.
    let saxpy = ParamLayout::from_sizes(&[4, 4, 8, 8]);
    shown(&refusal(saxpy.check("Function::launch", &[4, 4, 8]))?)?;
    shown(&refusal(saxpy.check("Function::launch", &[4, 8, 8, 8]))?)
}

#[test]
fn copies_and_slices_out_of_range() -> Result<(), String> {
    shown(&refusal(same_len("copy_from_host", 1024, 1000))?)?;
    shown(&refusal(range_of("DeviceBuffer::slice", 1000..2000, 1024))?)
}

#[test]
fn a_negative_device_ordinal() -> Result<(), String> {
    // Refused before the driver is loaded, so this runs anywhere. The ordinal past the last
    // device is checked in `device::ordinal`'s tests.
    shown(&refusal(Device::get(-1))?)
}

#[test]
fn driver_statuses_by_name() -> Result<(), String> {
    // Without a driver the text stops before the description in parentheses, which the
    // chapter shows as a loaded driver writes it; either way the chapter contains it.
    shown(&Error::Driver { call: "cuMemAlloc", status: sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY })?;
    shown(&Error::Driver { call: "cuStreamSynchronize", status: sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS })
}

#[test]
fn a_missing_driver() -> Result<(), String> {
    let Err(e @ Error::Load { .. }) = Device::count() else {
        // A driver is installed: there is nothing missing to show.
        return Ok(());
    };
    // What follows "tried" is the system loader's message for each file, which differs
    // between C libraries; the rest is the crate's.
    let text = e.to_string();
    let ours = text.split("(tried ").next().unwrap_or_default();
    if ours.len() < text.len() && CHAPTER.contains(&format!("{ours}(tried ")) {
        Ok(())
    } else {
        Err(format!("docs/src/errors.md does not show `{ours}`"))
    }
}
