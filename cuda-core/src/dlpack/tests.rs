//! CPU tests: the ABI layout, the data type mapping, the layout checks, and export and import
//! through the C structs with fake device memory.

use super::import::{ViewPlan, plan_view};
use super::layout::{check_fits, compact_strides, element_count, extent, is_compact};
use super::*;
use crate::error::Error;
use std::ffi::c_void;
use std::mem::{align_of, offset_of, size_of};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn message(e: Error) -> String {
    match e {
        Error::InvalidArgument { message, .. } => message,
        other => panic!("expected an InvalidArgument, got {other:?}"),
    }
}

#[test]
#[cfg(target_pointer_width = "64")]
fn structs_have_the_c_layout() {
    assert_eq!((size_of::<DLPackVersion>(), align_of::<DLPackVersion>()), (8, 4));
    assert_eq!((offset_of!(DLPackVersion, major), offset_of!(DLPackVersion, minor)), (0, 4));

    assert_eq!((size_of::<DLDeviceType>(), size_of::<DLDataTypeCode>()), (4, 1));
    assert_eq!((size_of::<DLDevice>(), align_of::<DLDevice>()), (8, 4));
    assert_eq!((offset_of!(DLDevice, device_type), offset_of!(DLDevice, device_id)), (0, 4));

    assert_eq!((size_of::<DLDataType>(), align_of::<DLDataType>()), (4, 2));
    assert_eq!(
        (offset_of!(DLDataType, code), offset_of!(DLDataType, bits), offset_of!(DLDataType, lanes)),
        (0, 1, 2)
    );

    assert_eq!((size_of::<DLTensor>(), align_of::<DLTensor>()), (48, 8));
    assert_eq!(offset_of!(DLTensor, data), 0);
    assert_eq!(offset_of!(DLTensor, device), 8);
    assert_eq!(offset_of!(DLTensor, ndim), 16);
    assert_eq!(offset_of!(DLTensor, dtype), 20);
    assert_eq!(offset_of!(DLTensor, shape), 24);
    assert_eq!(offset_of!(DLTensor, strides), 32);
    assert_eq!(offset_of!(DLTensor, byte_offset), 40);

    assert_eq!((size_of::<DLManagedTensor>(), align_of::<DLManagedTensor>()), (64, 8));
    assert_eq!(offset_of!(DLManagedTensor, dl_tensor), 0);
    assert_eq!(offset_of!(DLManagedTensor, manager_ctx), 48);
    assert_eq!(offset_of!(DLManagedTensor, deleter), 56);

    assert_eq!((size_of::<DLManagedTensorVersioned>(), align_of::<DLManagedTensorVersioned>()), (80, 8));
    assert_eq!(offset_of!(DLManagedTensorVersioned, version), 0);
    assert_eq!(offset_of!(DLManagedTensorVersioned, manager_ctx), 8);
    assert_eq!(offset_of!(DLManagedTensorVersioned, deleter), 16);
    assert_eq!(offset_of!(DLManagedTensorVersioned, flags), 24);
    assert_eq!(offset_of!(DLManagedTensorVersioned, dl_tensor), 32);
    // The deleter is a nullable function pointer: `None` is the C null pointer.
    assert_eq!(size_of::<Option<unsafe extern "C" fn(*mut DLManagedTensor)>>(), 8);
}

#[test]
fn constants_have_the_header_values() {
    assert_eq!(DLPACK_MAJOR_VERSION, 1);
    assert_eq!(DLPackVersion::CURRENT, DLPackVersion { major: 1, minor: DLPACK_MINOR_VERSION });
    assert_eq!(
        (
            DLPACK_FLAG_BITMASK_READ_ONLY,
            DLPACK_FLAG_BITMASK_IS_COPIED,
            DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
        ),
        (1, 2, 4)
    );
    assert_eq!(TensorFlags::READ_ONLY.bits() | TensorFlags::IS_COPIED.bits(), 3);
    let devices = [
        (DLDeviceType::kDLCPU, 1),
        (DLDeviceType::kDLCUDA, 2),
        (DLDeviceType::kDLCUDAHost, 3),
        (DLDeviceType::kDLROCM, 10),
        (DLDeviceType::kDLCUDAManaged, 13),
        (DLDeviceType::kDLOneAPI, 14),
    ];
    for (t, v) in devices {
        assert_eq!(t.0, v);
    }
    let codes = [
        (DLDataTypeCode::kDLInt, 0),
        (DLDataTypeCode::kDLUInt, 1),
        (DLDataTypeCode::kDLFloat, 2),
        (DLDataTypeCode::kDLBfloat, 4),
        (DLDataTypeCode::kDLComplex, 5),
        (DLDataTypeCode::kDLBool, 6),
        (DLDataTypeCode::kDLFloat8_e4m3fn, 10),
        (DLDataTypeCode::kDLFloat4_e2m1fn, 17),
    ];
    for (c, v) in codes {
        assert_eq!(c.0, v);
    }
    assert_eq!(DLDeviceType::kDLCUDA.to_string(), "kDLCUDA (2)");
    assert_eq!(DLDeviceType(99).to_string(), "unknown device type 99");
    assert_eq!(DLPackVersion { major: 1, minor: 3 }.to_string(), "1.3");
}

#[test]
fn element_types_map_to_their_data_types() {
    fn check<T: DlpackDtype>(code: DLDataTypeCode, bits: u8, name: &str) {
        assert_eq!(T::DTYPE, DLDataType { code: code.0, bits, lanes: 1 }, "{name}");
        assert_eq!(T::DTYPE.type_code(), code);
        assert_eq!(T::DTYPE.to_string(), name);
        assert!(super::dtype::size_matches::<T>(), "{name}");
    }
    check::<i8>(DLDataTypeCode::kDLInt, 8, "int8");
    check::<i16>(DLDataTypeCode::kDLInt, 16, "int16");
    check::<i32>(DLDataTypeCode::kDLInt, 32, "int32");
    check::<i64>(DLDataTypeCode::kDLInt, 64, "int64");
    check::<u8>(DLDataTypeCode::kDLUInt, 8, "uint8");
    check::<u16>(DLDataTypeCode::kDLUInt, 16, "uint16");
    check::<u32>(DLDataTypeCode::kDLUInt, 32, "uint32");
    check::<u64>(DLDataTypeCode::kDLUInt, 64, "uint64");
    check::<f32>(DLDataTypeCode::kDLFloat, 32, "float32");
    check::<f64>(DLDataTypeCode::kDLFloat, 64, "float64");
    assert_eq!(DLDataType::new(DLDataTypeCode::kDLBfloat, 16, 1).to_string(), "bfloat16");
    assert_eq!(DLDataType::new(DLDataTypeCode::kDLFloat, 32, 4).to_string(), "float32x4");
    assert_eq!(DLDataType::new(DLDataTypeCode::kDLFloat, 32, 4).size_in_bits(), 128);
    assert_eq!(DLDataType { code: 200, bits: 8, lanes: 1 }.to_string(), "code 200 of 8 bits");
}

/// A user type whose declared data type is wider than the type.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Lying(u32);

// SAFETY: a transparent `u32`.
unsafe impl bytemuck::Zeroable for Lying {}
unsafe impl bytemuck::Pod for Lying {}

impl DlpackDtype for Lying {
    const DTYPE: DLDataType = DLDataType::new(DLDataTypeCode::kDLFloat, 64, 1);
}

#[test]
fn shapes_are_checked_against_the_length() {
    assert!(check_fits("t", &[3, 4], None, 12).is_ok());
    assert!(check_fits("t", &[3, 4], None, 20).is_ok());
    assert!(check_fits("t", &[], None, 1).is_ok());
    assert!(check_fits("t", &[0, 5], None, 0).is_ok());
    let m = message(check_fits("op", &[3, 4], None, 10).unwrap_err());
    assert!(m.contains("shape [3, 4] holds 12 elements but the buffer has 10"), "{m}");
    let m = message(check_fits("op", &[3, -4], None, 100).unwrap_err());
    assert!(m.contains("shape[1] is -4"), "{m}");
    let m = message(check_fits("op", &[i64::MAX, i64::MAX], None, 100).unwrap_err());
    assert!(m.contains("overflows"), "{m}");
    // An extent of 0 makes the tensor empty, whatever the others are.
    assert_eq!(element_count("t", &[i64::MAX, i64::MAX, 0]).ok(), Some(0));
    assert_eq!(element_count("t", &[]).ok(), Some(1));
    assert!(check_layout(&[2, 5], None, 10).is_ok());
    let m = message(check_layout(&[2, 5], Some(&[6, 1]), 10).unwrap_err());
    assert!(m.contains("reach element 10 but the buffer has 10"), "{m}");
}

#[test]
fn strides_are_checked_by_the_largest_index_they_reach() {
    // A 3x4 window with a row pitch of 6: reaches 2*6 + 3 = 15, so 16 elements.
    assert_eq!(extent("t", &[3, 4], &[6, 1]).ok(), Some(16));
    assert!(check_fits("t", &[3, 4], Some(&[6, 1]), 16).is_ok());
    let m = message(check_fits("op", &[3, 4], Some(&[6, 1]), 15).unwrap_err());
    assert!(m.contains("strides [6, 1] over shape [3, 4] reach element 15 but the buffer has 15"), "{m}");
    // Column-major and broadcast (stride 0) layouts.
    assert!(check_fits("t", &[3, 4], Some(&[1, 3]), 12).is_ok());
    assert_eq!(extent("t", &[5, 4], &[0, 1]).ok(), Some(4));
    let m = message(check_fits("op", &[3, 4], Some(&[4]), 100).unwrap_err());
    assert!(m.contains("strides [4] has 1 entries but shape [3, 4] has 2"), "{m}");
    let m = message(check_fits("op", &[3, 4], Some(&[-4, 1]), 100).unwrap_err());
    assert!(m.contains("strides[0] is -4"), "{m}");
    let m = message(check_fits("op", &[i64::MAX, 3], Some(&[i64::MAX, 1]), 100).unwrap_err());
    assert!(m.contains("overflows") || m.contains("reach element"), "{m}");
    assert_eq!(extent("t", &[0, 4], &[4, 1]).ok(), Some(0));
}

#[test]
fn compact_strides_and_contiguity() {
    assert_eq!(compact_strides("t", &[2, 3, 4]).ok(), Some(vec![12, 4, 1]));
    assert_eq!(compact_strides("t", &[]).ok(), Some(vec![]));
    assert_eq!(compact_strides("t", &[0, 3]).ok(), Some(vec![3, 1]));
    assert!(compact_strides("t", &[i64::MAX, 4, 4]).is_err());
    assert!(is_compact(&[2, 3], None));
    assert!(is_compact(&[2, 3], Some(&[3, 1])));
    assert!(!is_compact(&[2, 3], Some(&[1, 2])));
    assert!(!is_compact(&[2, 3], Some(&[4, 1])));
    // Extents of 1 may carry any stride; empty tensors are compact.
    assert!(is_compact(&[2, 1, 3], Some(&[3, 99, 1])));
    assert!(is_compact(&[0, 3], Some(&[7, 7])));
    assert!(!is_compact(&[2, 3], Some(&[3])));
}

/// An owner that counts its drops, and can panic in `drop`.
struct Owner {
    drops: Arc<AtomicUsize>,
    panic: bool,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        if self.panic {
            panic!("the owner's drop panics");
        }
    }
}

const FAKE_ADDRESS: usize = 0x7f00_0000_1000;

fn fake_export(
    shape: &[i64],
    strides: Option<&[i64]>,
    len: usize,
    panic: bool,
) -> (Result<ManagedTensor, Error>, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let owner = Owner { drops: drops.clone(), panic };
    let device = DLDevice { device_type: DLDeviceType::kDLCUDA, device_id: 0 };
    // SAFETY: the address is never dereferenced by these tests.
    let t = unsafe {
        ManagedTensor::from_owner(
            owner,
            std::ptr::without_provenance_mut(FAKE_ADDRESS),
            len,
            device,
            f32::DTYPE,
            shape,
            strides,
        )
    };
    (t, drops)
}

#[test]
fn exports_fill_the_versioned_header() {
    let (t, drops) = fake_export(&[2, 3], None, 6, false);
    let t = t.unwrap();
    assert_eq!(t.shape(), [2, 3]);
    assert_eq!(t.strides(), [3, 1]);
    assert_eq!(t.dtype(), f32::DTYPE);
    assert_eq!(t.device(), DLDevice { device_type: DLDeviceType::kDLCUDA, device_id: 0 });
    assert_eq!(t.flags(), TensorFlags::empty());
    // SAFETY: the header lives until `t` is dropped.
    let h = unsafe { &*t.as_raw() };
    assert_eq!(h.version, DLPackVersion::CURRENT);
    assert_eq!(h.flags, 0);
    assert!(!h.manager_ctx.is_null() && h.deleter.is_some());
    assert_eq!(h.dl_tensor.data.addr(), FAKE_ADDRESS);
    assert_eq!((h.dl_tensor.ndim, h.dl_tensor.byte_offset), (2, 0));
    assert!(format!("{t:?}").contains("float32"));
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(t);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "dropping an export that was not handed over frees it");
}

#[test]
fn exports_with_a_bad_layout_are_refused_and_drop_the_owner() {
    let (t, drops) = fake_export(&[4, 4], None, 15, false);
    let m = message(t.unwrap_err());
    assert!(m.contains("holds 16 elements but the buffer has 15"), "{m}");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let (t, _) = fake_export(&[2, 2], Some(&[2, 1, 1]), 15, false);
    assert!(message(t.unwrap_err()).contains("has 3 entries"));
}

#[test]
fn versioned_round_trip_through_the_c_abi() {
    let (t, drops) = fake_export(&[4, 8], Some(&[8, 1]), 32, false);
    let mut t = t.unwrap();
    t.set_flags(TensorFlags::READ_ONLY);
    let raw = t.into_raw();
    assert_eq!(drops.load(Ordering::SeqCst), 0, "handing over frees nothing");
    // SAFETY: a live managed tensor, handed over once.
    let imported = unsafe { ImportedTensor::from_raw(raw) }.unwrap();
    assert_eq!(imported.version(), Some(DLPackVersion::CURRENT));
    assert_eq!(imported.shape(), [4, 8]);
    assert_eq!(imported.strides(), Some(&[8i64, 1][..]));
    assert_eq!(imported.dtype(), f32::DTYPE);
    assert_eq!(imported.device().device_type, DLDeviceType::kDLCUDA);
    assert_eq!(imported.data().addr(), FAKE_ADDRESS);
    assert_eq!(imported.num_elements().ok(), Some(32));
    assert!(imported.is_contiguous() && imported.is_read_only());
    assert_eq!(
        plan_view::<f32>("t", &imported, 0, false).ok(),
        Some(ViewPlan { address: FAKE_ADDRESS as u64, len: 32 })
    );
    let m = message(plan_view::<f32>("t", &imported, 0, true).unwrap_err());
    assert!(m.contains("READ_ONLY"), "{m}");
    let m = message(plan_view::<i32>("t", &imported, 0, false).unwrap_err());
    assert!(m.contains("dtype is float32 but the view's element type is int32"), "{m}");
    let m = message(plan_view::<f32>("t", &imported, 1, false).unwrap_err());
    assert!(m.contains("device.device_id is 0 but the context is on device 1"), "{m}");
    drop(imported);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the importer's drop calls the deleter once");
}

#[test]
fn legacy_round_trip_through_the_c_abi() {
    let (t, drops) = fake_export(&[5], None, 5, false);
    let mut t = t.unwrap();
    t.set_flags(TensorFlags::READ_ONLY);
    let raw = t.into_raw_legacy();
    // SAFETY: a live managed tensor, handed over once.
    let imported = unsafe { ImportedTensor::from_raw_legacy(raw) }.unwrap();
    assert_eq!(imported.version(), None);
    assert_eq!(imported.flags(), TensorFlags::empty(), "the unversioned header has no flags");
    assert_eq!((imported.shape(), imported.strides()), (&[5i64][..], Some(&[1i64][..])));
    assert_eq!(plan_view::<f32>("t", &imported, 0, true).map(|p| p.len).ok(), Some(5));
    drop(imported);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn a_panicking_owner_does_not_unwind_through_the_deleter() {
    // Through the C deleter, as a consumer calls it: a panic escaping an `extern "C"` function
    // would abort the test process, so returning here shows it was caught.
    let (t, drops) = fake_export(&[3], None, 3, true);
    let raw = t.unwrap().into_raw();
    // SAFETY: a live managed tensor; its deleter runs once.
    unsafe {
        let deleter = (*raw).deleter.unwrap();
        deleter(raw);
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // And through `Drop` of both owning types.
    let (t, drops) = fake_export(&[3], None, 3, true);
    drop(t.unwrap());
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let (t, drops) = fake_export(&[3], None, 3, true);
    // SAFETY: a live managed tensor, handed over once.
    drop(unsafe { ImportedTensor::from_raw_legacy(t.unwrap().into_raw_legacy()) }.unwrap());
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn exports_refuse_element_types_whose_dtype_lies_about_their_size() {
    assert!(!super::dtype::size_matches::<Lying>());
    let (t, _) = fake_export(&[2], None, 2, false);
    // SAFETY: a live managed tensor, handed over once.
    let imported = unsafe { ImportedTensor::from_raw(t.unwrap().into_raw()) }.unwrap();
    assert!(plan_view::<Lying>("t", &imported, 0, false).is_err());
}

/// A tensor as a foreign producer would build it: one heap block, a deleter that frees it and
/// counts its calls in the counter the manager context points to.
#[repr(C)]
struct Foreign {
    header: DLManagedTensorVersioned,
    shape: [i64; 2],
    strides: [i64; 2],
    calls: Arc<AtomicUsize>,
}

unsafe extern "C" fn foreign_deleter(p: *mut DLManagedTensorVersioned) {
    // SAFETY: `p` is the first field of a boxed `Foreign` (repr(C)), freed once.
    let block = unsafe { Box::from_raw(p.cast::<Foreign>()) };
    block.calls.fetch_add(1, Ordering::SeqCst);
}

fn foreign(
    edit: impl FnOnce(&mut DLManagedTensorVersioned),
) -> (*mut DLManagedTensorVersioned, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let block = Box::into_raw(Box::new(Foreign {
        header: DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(foreign_deleter),
            flags: 0,
            dl_tensor: DLTensor {
                data: std::ptr::without_provenance_mut(0x10_0000),
                device: DLDevice { device_type: DLDeviceType::kDLCUDA, device_id: 0 },
                ndim: 2,
                dtype: i32::DTYPE,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 16,
            },
        },
        shape: [3, 5],
        strides: [5, 1],
        calls: calls.clone(),
    }));
    // SAFETY: a fresh allocation; the pointers stay inside it until the deleter frees it.
    unsafe {
        (*block).header.manager_ctx = block.cast::<c_void>();
        (*block).header.dl_tensor.shape = (&raw mut (*block).shape).cast();
        (*block).header.dl_tensor.strides = (&raw mut (*block).strides).cast();
        edit(&mut (*block).header);
    }
    (block.cast(), calls)
}

#[test]
fn a_foreign_tensor_is_read_and_its_deleter_called_once() {
    let (raw, calls) = foreign(|_| {});
    // SAFETY: a live managed tensor, handed over once.
    let t = unsafe { ImportedTensor::from_raw(raw) }.unwrap();
    assert_eq!(t.version(), Some(DLPackVersion { major: 1, minor: 0 }));
    assert_eq!((t.shape(), t.strides()), (&[3i64, 5][..], Some(&[5i64, 1][..])));
    assert_eq!((t.byte_offset(), t.ndim()), (16, 2));
    assert_eq!(plan_view::<i32>("t", &t, 0, true).ok(), Some(ViewPlan { address: 0x10_0000 + 16, len: 15 }));
    assert!(format!("{t:?}").contains("int32"));
    drop(t);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A change to a foreign tensor's header.
type Edit = fn(&mut DLManagedTensorVersioned);

#[test]
fn views_of_foreign_tensors_check_each_field() {
    let cases: [(Edit, &str); 7] = [
        (|h| h.dl_tensor.device.device_type = DLDeviceType::kDLCPU, "device.device_type is kDLCPU (1)"),
        (|h| h.dl_tensor.device.device_id = 3, "device.device_id is 3"),
        (|h| h.dl_tensor.dtype = f32::DTYPE, "dtype is float32"),
        (|h| h.dl_tensor.byte_offset = 2, "not aligned to 4 bytes"),
        (|h| h.dl_tensor.data = std::ptr::without_provenance_mut(0x10_0001), "(0x100001 + 16 = 0x100011)"),
        (|h| h.dl_tensor.byte_offset = u64::MAX, "overflows"),
        (|h| h.dl_tensor.ndim = 1, "strides [5] over shape [3]"),
    ];
    for (edit, expected) in cases {
        let (raw, calls) = foreign(edit);
        // SAFETY: a live managed tensor, handed over once.
        let t = unsafe { ImportedTensor::from_raw(raw) }.unwrap();
        let m = message(plan_view::<i32>("t", &t, 0, false).unwrap_err());
        assert!(m.contains(expected), "expected {expected:?} in {m:?}");
        drop(t);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
    // Column-major strides are not contiguous; a null base with no offset is refused.
    let (raw, _) = foreign(|h| {
        // SAFETY: the strides point at two entries.
        unsafe { *h.dl_tensor.strides = 1 };
    });
    // SAFETY: as above.
    let t = unsafe { ImportedTensor::from_raw(raw) }.unwrap();
    assert!(!t.is_contiguous());
    assert!(message(plan_view::<i32>("t", &t, 0, false).unwrap_err()).contains("not compact row-major"));
    let (raw, _) = foreign(|h| {
        h.dl_tensor.data = std::ptr::null_mut();
        h.dl_tensor.byte_offset = 0;
    });
    // SAFETY: as above.
    let t = unsafe { ImportedTensor::from_raw(raw) }.unwrap();
    assert!(message(plan_view::<i32>("t", &t, 0, false).unwrap_err()).contains("is null"));
    // Managed memory may be viewed from any device's context; null strides are compact.
    let (raw, _) = foreign(|h| {
        h.dl_tensor.device = DLDevice { device_type: DLDeviceType::kDLCUDAManaged, device_id: 5 };
        h.dl_tensor.strides = std::ptr::null_mut();
    });
    // SAFETY: as above.
    let t = unsafe { ImportedTensor::from_raw(raw) }.unwrap();
    assert_eq!(t.strides(), None);
    assert_eq!(plan_view::<i32>("t", &t, 0, false).map(|p| p.len).ok(), Some(15));
}

#[test]
fn unreadable_foreign_tensors_are_refused_and_deleted() {
    let cases: [(Edit, &str); 3] = [
        (|h| h.version.major = 2, "version.major is 2"),
        (|h| h.dl_tensor.ndim = -1, "dl_tensor.ndim is -1"),
        (|h| h.dl_tensor.shape = std::ptr::null_mut(), "dl_tensor.shape is null but ndim is 2"),
    ];
    for (edit, expected) in cases {
        let (raw, calls) = foreign(edit);
        // SAFETY: a live managed tensor, handed over once.
        let m = message(unsafe { ImportedTensor::from_raw(raw) }.unwrap_err());
        assert!(m.contains(expected), "expected {expected:?} in {m:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "a refused tensor is given back through its deleter");
    }
    // SAFETY: null is allowed and refused.
    assert!(unsafe { ImportedTensor::from_raw(std::ptr::null_mut()) }.is_err());
    // SAFETY: as above.
    assert!(unsafe { ImportedTensor::from_raw_legacy(std::ptr::null_mut()) }.is_err());
}

#[test]
fn a_tensor_without_a_deleter_is_dropped_quietly() {
    let mut shape = [4i64];
    let mut header = DLManagedTensor {
        dl_tensor: DLTensor {
            data: std::ptr::without_provenance_mut(0x2000),
            device: DLDevice { device_type: DLDeviceType::kDLCUDA, device_id: 0 },
            ndim: 1,
            dtype: u8::DTYPE,
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        },
        manager_ctx: std::ptr::null_mut(),
        deleter: None,
    };
    // SAFETY: the header and its shape outlive the imported tensor, which has no deleter to call.
    let t = unsafe { ImportedTensor::from_raw_legacy(&mut header) }.unwrap();
    assert_eq!(t.num_elements().ok(), Some(4));
    drop(t);
}
