//! The C ABI of DLPack 1.x (`dlpack.h`), written out by hand from the specification's field
//! list. The names are the C names, so that code can be checked against the header.

use std::ffi::c_void;
use std::fmt;

/// `DLPACK_MAJOR_VERSION`: the major version of the ABI these types describe. A tensor whose
/// major version differs has another layout; only its deleter may be called.
pub const DLPACK_MAJOR_VERSION: u32 = 1;

/// `DLPACK_MINOR_VERSION`: the minor version of the header these definitions follow. Minor
/// versions only add enumeration values; the layout is that of every 1.x.
pub const DLPACK_MINOR_VERSION: u32 = 1;

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write to the tensor's data.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;

/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the producer made a copy that the consumer owns alone until
/// it calls the deleter.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;

/// `DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED`: elements of a type narrower than a byte are
/// padded to one byte each rather than packed.
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

/// `DLPackVersion`: the ABI version a [`DLManagedTensorVersioned`] was made for.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLPackVersion {
    /// A change of major version changes the layout of [`DLManagedTensorVersioned`].
    pub major: u32,
    /// A change of minor version adds enumeration values only.
    pub minor: u32,
}

impl DLPackVersion {
    /// The version this crate writes into the tensors it exports.
    pub const CURRENT: DLPackVersion =
        DLPackVersion { major: DLPACK_MAJOR_VERSION, minor: DLPACK_MINOR_VERSION };
}

impl fmt::Display for DLPackVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// `DLDeviceType`: the kind of memory a tensor's data lives in.
///
/// A C enum, kept as a newtype over its `int` so that values a newer producer sends are not
/// undefined behaviour; the known values are associated constants.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDeviceType(pub i32);

#[allow(non_upper_case_globals)]
impl DLDeviceType {
    /// `kDLCPU`: host memory.
    pub const kDLCPU: DLDeviceType = DLDeviceType(1);
    /// `kDLCUDA`: CUDA device memory.
    pub const kDLCUDA: DLDeviceType = DLDeviceType(2);
    /// `kDLCUDAHost`: page-locked host memory from the CUDA allocator (`cudaMallocHost`).
    pub const kDLCUDAHost: DLDeviceType = DLDeviceType(3);
    /// `kDLOpenCL`: an OpenCL buffer.
    pub const kDLOpenCL: DLDeviceType = DLDeviceType(4);
    /// `kDLVulkan`: a Vulkan buffer.
    pub const kDLVulkan: DLDeviceType = DLDeviceType(7);
    /// `kDLMetal`: Metal memory on an Apple GPU.
    pub const kDLMetal: DLDeviceType = DLDeviceType(8);
    /// `kDLVPI`: a Verilog simulator buffer.
    pub const kDLVPI: DLDeviceType = DLDeviceType(9);
    /// `kDLROCM`: ROCm device memory.
    pub const kDLROCM: DLDeviceType = DLDeviceType(10);
    /// `kDLROCMHost`: page-locked host memory from the ROCm allocator.
    pub const kDLROCMHost: DLDeviceType = DLDeviceType(11);
    /// `kDLExtDev`: reserved for experiments with new devices.
    pub const kDLExtDev: DLDeviceType = DLDeviceType(12);
    /// `kDLCUDAManaged`: CUDA managed (unified) memory.
    pub const kDLCUDAManaged: DLDeviceType = DLDeviceType(13);
    /// `kDLOneAPI`: oneAPI unified shared memory.
    pub const kDLOneAPI: DLDeviceType = DLDeviceType(14);
    /// `kDLWebGPU`: a WebGPU buffer.
    pub const kDLWebGPU: DLDeviceType = DLDeviceType(15);
    /// `kDLHexagon`: Qualcomm Hexagon DSP memory.
    pub const kDLHexagon: DLDeviceType = DLDeviceType(16);
    /// `kDLMAIA`: Microsoft MAIA device memory.
    pub const kDLMAIA: DLDeviceType = DLDeviceType(17);

    /// The C name of a known value (`"kDLCUDA"`), or `None`.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "kDLCPU",
            2 => "kDLCUDA",
            3 => "kDLCUDAHost",
            4 => "kDLOpenCL",
            7 => "kDLVulkan",
            8 => "kDLMetal",
            9 => "kDLVPI",
            10 => "kDLROCM",
            11 => "kDLROCMHost",
            12 => "kDLExtDev",
            13 => "kDLCUDAManaged",
            14 => "kDLOneAPI",
            15 => "kDLWebGPU",
            16 => "kDLHexagon",
            17 => "kDLMAIA",
            _ => return None,
        })
    }
}

impl fmt::Debug for DLDeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for DLDeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "unknown device type {}", self.0),
        }
    }
}

/// `DLDevice`: where a tensor's data lives.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDevice {
    /// The kind of memory.
    pub device_type: DLDeviceType,
    /// The device's ordinal among devices of that kind (the CUDA device ordinal for CUDA).
    pub device_id: i32,
}

/// `DLDataTypeCode`: the family of an element type, as stored in [`DLDataType::code`].
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDataTypeCode(pub u8);

#[allow(non_upper_case_globals)]
impl DLDataTypeCode {
    /// `kDLInt`: signed integers.
    pub const kDLInt: DLDataTypeCode = DLDataTypeCode(0);
    /// `kDLUInt`: unsigned integers.
    pub const kDLUInt: DLDataTypeCode = DLDataTypeCode(1);
    /// `kDLFloat`: IEEE 754 binary floating point.
    pub const kDLFloat: DLDataTypeCode = DLDataTypeCode(2);
    /// `kDLOpaqueHandle`: opaque handles whose meaning producer and consumer agree on.
    pub const kDLOpaqueHandle: DLDataTypeCode = DLDataTypeCode(3);
    /// `kDLBfloat`: bfloat16.
    pub const kDLBfloat: DLDataTypeCode = DLDataTypeCode(4);
    /// `kDLComplex`: complex numbers, real part first; `bits` counts both parts.
    pub const kDLComplex: DLDataTypeCode = DLDataTypeCode(5);
    /// `kDLBool`: booleans, stored in 8 bits each by convention.
    pub const kDLBool: DLDataTypeCode = DLDataTypeCode(6);
    /// `kDLFloat8_e3m4`.
    pub const kDLFloat8_e3m4: DLDataTypeCode = DLDataTypeCode(7);
    /// `kDLFloat8_e4m3`.
    pub const kDLFloat8_e4m3: DLDataTypeCode = DLDataTypeCode(8);
    /// `kDLFloat8_e4m3b11fnuz`.
    pub const kDLFloat8_e4m3b11fnuz: DLDataTypeCode = DLDataTypeCode(9);
    /// `kDLFloat8_e4m3fn`.
    pub const kDLFloat8_e4m3fn: DLDataTypeCode = DLDataTypeCode(10);
    /// `kDLFloat8_e4m3fnuz`.
    pub const kDLFloat8_e4m3fnuz: DLDataTypeCode = DLDataTypeCode(11);
    /// `kDLFloat8_e5m2`.
    pub const kDLFloat8_e5m2: DLDataTypeCode = DLDataTypeCode(12);
    /// `kDLFloat8_e5m2fnuz`.
    pub const kDLFloat8_e5m2fnuz: DLDataTypeCode = DLDataTypeCode(13);
    /// `kDLFloat8_e8m0fnu`.
    pub const kDLFloat8_e8m0fnu: DLDataTypeCode = DLDataTypeCode(14);
    /// `kDLFloat6_e2m3fn`.
    pub const kDLFloat6_e2m3fn: DLDataTypeCode = DLDataTypeCode(15);
    /// `kDLFloat6_e3m2fn`.
    pub const kDLFloat6_e3m2fn: DLDataTypeCode = DLDataTypeCode(16);
    /// `kDLFloat4_e2m1fn`.
    pub const kDLFloat4_e2m1fn: DLDataTypeCode = DLDataTypeCode(17);

    /// A short name of the family, as used in type names (`"float"` for `kDLFloat`).
    pub fn short_name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "int",
            1 => "uint",
            2 => "float",
            3 => "handle",
            4 => "bfloat",
            5 => "complex",
            6 => "bool",
            7 => "float8_e3m4",
            8 => "float8_e4m3",
            9 => "float8_e4m3b11fnuz",
            10 => "float8_e4m3fn",
            11 => "float8_e4m3fnuz",
            12 => "float8_e5m2",
            13 => "float8_e5m2fnuz",
            14 => "float8_e8m0fnu",
            15 => "float6_e2m3fn",
            16 => "float6_e3m2fn",
            17 => "float4_e2m1fn",
            _ => return None,
        })
    }
}

/// `DLDataType`: the element type of a tensor.
///
/// `float32` is `{ code: kDLFloat, bits: 32, lanes: 1 }`; a vector of four of them is
/// `lanes: 4`. `code` holds a [`DLDataTypeCode`] value (a byte, as in C).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDataType {
    /// The type's family: a [`DLDataTypeCode`] value.
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes per element: 1 for scalars.
    pub lanes: u16,
}

impl DLDataType {
    /// A data type of `bits` per lane and `lanes` lanes in family `code`.
    pub const fn new(code: DLDataTypeCode, bits: u8, lanes: u16) -> DLDataType {
        DLDataType { code: code.0, bits, lanes }
    }

    /// The family, as a [`DLDataTypeCode`].
    pub const fn type_code(self) -> DLDataTypeCode {
        DLDataTypeCode(self.code)
    }

    /// Bits per element: `bits * lanes`.
    pub const fn size_in_bits(self) -> u32 {
        self.bits as u32 * self.lanes as u32
    }
}

impl fmt::Display for DLDataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.type_code().short_name() {
            Some(name) => write!(f, "{name}{}", self.bits)?,
            None => write!(f, "code {} of {} bits", self.code, self.bits)?,
        }
        if self.lanes != 1 { write!(f, "x{}", self.lanes) } else { Ok(()) }
    }
}

/// `DLTensor`: a strided view of memory, not owning it.
///
/// `data` (plus `byte_offset`) is the address of the first element; `shape` and `strides` point
/// to `ndim` values each. `strides` counts elements, not bytes, and may be null, which means
/// compact row-major (C order).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    /// The base address: a device address for CUDA memory.
    pub data: *mut c_void,
    /// Where the data lives.
    pub device: DLDevice,
    /// The number of dimensions.
    pub ndim: i32,
    /// The element type.
    pub dtype: DLDataType,
    /// `ndim` extents.
    pub shape: *mut i64,
    /// `ndim` strides in elements, or null for compact row-major.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensorVersioned`: a [`DLTensor`] lent by its producer, with a version, flags and
/// a deleter that the consumer calls once when done with it.
///
/// Everything up to `flags` keeps its place in every future version, so that a consumer can
/// read the version and call the deleter of a tensor it cannot otherwise read.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The ABI version the producer wrote.
    pub version: DLPackVersion,
    /// The producer's own state; may be null.
    pub manager_ctx: *mut c_void,
    /// Frees the tensor (this struct included); may be null when there is nothing to free.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*` bits; 0 by default.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// `DLManagedTensor`: the unversioned form of [`DLManagedTensorVersioned`], from before
/// DLPack 1.0, still what many consumers (and capsules named `"dltensor"`) take.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's own state; may be null.
    pub manager_ctx: *mut c_void,
    /// Frees the tensor (this struct included); may be null when there is nothing to free.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}
