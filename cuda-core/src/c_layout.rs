//! Members of C structs whose declaration differs between the supported headers, reached
//! through one accessor per member so that the rest of the crate compiles against bindings of
//! any of them.
//!
//! `CUmemLocation` (and the runtime's `cudaMemLocation`) hold `int id` after the location type.
//! CUDA 13.0 declares it as a plain member; later headers move it into an anonymous union with
//! the `{deviceId, localityDomainId}` pair of locality domains, which bindgen names
//! `__bindgen_anon_1`. Both declarations put the `int` at the same offset, so the accessors
//! read and write it there; the assertions below stop the build if a header ever moves it.

use cuhost_driver_sys as sys;
use std::mem::{align_of, offset_of, size_of};

/// The byte offset of `id` in both declarations: right after the 4-byte location type.
const ID_OFFSET: usize = 4;

const _: () = {
    assert!(offset_of!(sys::CUmemLocation, type_) == 0);
    assert!(size_of::<sys::CUmemLocationType>() == ID_OFFSET);
    assert!(size_of::<sys::CUmemLocation>() == ID_OFFSET + size_of::<i32>());
    assert!(align_of::<sys::CUmemLocation>() == align_of::<i32>());
};

/// A `CUmemLocation` of `type_` and `id`, every other byte zero.
pub(crate) fn mem_location(type_: sys::CUmemLocationType, id: i32) -> sys::CUmemLocation {
    let mut raw = sys::CUmemLocation { type_, ..Default::default() };
    let base: *mut sys::CUmemLocation = &mut raw;
    // SAFETY: the assertions above place an aligned `int` at ID_OFFSET inside the struct, and
    // every bit pattern is a valid value of the union that holds it.
    unsafe { base.cast::<u8>().add(ID_OFFSET).cast::<i32>().write(id) };
    raw
}

/// The `id` of a `CUmemLocation` (a device ordinal or a NUMA node, by its type).
pub(crate) fn mem_location_id(raw: &sys::CUmemLocation) -> i32 {
    let base: *const sys::CUmemLocation = raw;
    // SAFETY: as in `mem_location`; the struct is initialised (every byte of a bindgen value).
    unsafe { base.cast::<u8>().add(ID_OFFSET).cast::<i32>().read() }
}

/// The runtime's `cudaMemLocation`, laid out as the driver's.
#[cfg(feature = "runtime")]
pub(crate) mod runtime {
    use super::ID_OFFSET;
    use cuhost_cudart_sys as rt;
    use std::mem::{align_of, offset_of, size_of};

    const _: () = {
        assert!(offset_of!(rt::cudaMemLocation, type_) == 0);
        assert!(size_of::<rt::cudaMemLocationType>() == ID_OFFSET);
        assert!(size_of::<rt::cudaMemLocation>() == ID_OFFSET + size_of::<i32>());
        assert!(align_of::<rt::cudaMemLocation>() == align_of::<i32>());
    };

    /// A `cudaMemLocation` of `type_` and `id`, every other byte zero.
    pub(crate) fn mem_location(type_: rt::cudaMemLocationType, id: i32) -> rt::cudaMemLocation {
        let mut raw = rt::cudaMemLocation { type_, ..Default::default() };
        let base: *mut rt::cudaMemLocation = &mut raw;
        // SAFETY: as for the driver's struct; the assertions above hold for this one too.
        unsafe { base.cast::<u8>().add(ID_OFFSET).cast::<i32>().write(id) };
        raw
    }

    /// The `id` of a `cudaMemLocation`.
    #[cfg(test)]
    pub(crate) fn mem_location_id(raw: &rt::cudaMemLocation) -> i32 {
        let base: *const rt::cudaMemLocation = raw;
        // SAFETY: as for the driver's struct.
        unsafe { base.cast::<u8>().add(ID_OFFSET).cast::<i32>().read() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_round_trips_and_lands_after_the_type() {
        let raw = mem_location(sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA, 0x0102_0304);
        assert_eq!(raw.type_, sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA);
        assert_eq!(mem_location_id(&raw), 0x0102_0304);
        let base: *const sys::CUmemLocation = &raw;
        // SAFETY: an 8-byte plain C struct read as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(base.cast::<u8>(), size_of::<sys::CUmemLocation>()) };
        assert_eq!(&bytes[ID_OFFSET..], &0x0102_0304i32.to_ne_bytes());
    }

    #[test]
    #[cfg(feature = "runtime")]
    fn the_runtime_id_lands_after_the_type() {
        let rt_raw =
            runtime::mem_location(cuhost_cudart_sys::cudaMemLocationType::cudaMemLocationTypeDevice, 7);
        let rt_base: *const cuhost_cudart_sys::cudaMemLocation = &rt_raw;
        // SAFETY: as above.
        let rt_bytes = unsafe { std::slice::from_raw_parts(rt_base.cast::<u8>(), 8) };
        assert_eq!(&rt_bytes[ID_OFFSET..], &7i32.to_ne_bytes());
        assert_eq!(runtime::mem_location_id(&rt_raw), 7);
    }
}
