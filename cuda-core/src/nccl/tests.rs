//! CPU tests of what needs no GPU: ids, configurations, versions, datatypes.

use super::version::too_old;
use super::*;
use crate::error::Error;
use nccl_sys as nccl;

#[test]
fn ids_round_trip_through_bytes_and_hex() {
    let mut bytes = [0u8; UniqueId::BYTES];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    let id = UniqueId::from_bytes(&bytes).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(id.as_bytes(), &bytes);
    assert_eq!(UniqueId::from_hex(&id.to_hex()).ok(), Some(id));
    assert_eq!(UniqueId::from_raw(id.as_raw()), id);
    assert!(matches!(UniqueId::from_bytes(&bytes[1..]), Err(Error::InvalidArgument { .. })));
    assert!(matches!(UniqueId::from_hex("abc"), Err(Error::InvalidArgument { .. })));
    let bad = "zz".repeat(UniqueId::BYTES);
    assert!(matches!(UniqueId::from_hex(&bad), Err(Error::InvalidArgument { .. })));
}

#[test]
fn a_default_config_is_what_the_initializer_makes() {
    let c = Config::new().to_raw();
    assert_eq!(c.size, std::mem::size_of::<nccl::ncclConfig_t>());
    assert_eq!(c.magic, 0xcafe_beef);
    assert_eq!(c.version, nccl::NCCL_VERSION_CODE);
    for field in [
        c.blocking,
        c.cgaClusterSize,
        c.minCTAs,
        c.maxCTAs,
        c.splitShare,
        c.trafficClass,
        c.collnetEnable,
        c.CTAPolicy,
        c.shrinkShare,
        c.nvlsCTAs,
        c.nChannelsPerNetPeer,
        c.nvlinkCentricSched,
    ] {
        assert_eq!(field, i32::MIN);
    }
    assert!(c.netName.is_null() && c.commName.is_null());
}

#[test]
fn config_setters_fill_their_fields() {
    let config = Config::new()
        .blocking(false)
        .cga_cluster_size(2)
        .min_ctas(4)
        .max_ctas(8)
        .split_share(true)
        .cta_policy(CtaPolicy::Zero)
        .net_name("Socket")
        .unwrap_or_default();
    let c = config.to_raw();
    assert_eq!((c.blocking, c.cgaClusterSize, c.minCTAs, c.maxCTAs, c.splitShare), (0, 2, 4, 8, 1));
    assert_eq!(c.CTAPolicy, nccl::NCCL_CTA_POLICY_ZERO as i32);
    assert_eq!(CtaPolicy::from_raw(c.CTAPolicy), Some(CtaPolicy::Zero));
    assert_eq!(CtaPolicy::from_raw(99), None);
    // SAFETY: the pointer points into `config`, alive here.
    let name = unsafe { std::ffi::CStr::from_ptr(c.netName) };
    assert_eq!(name.to_str().ok(), Some("Socket"));
    assert!(matches!(Config::new().comm_name("a\0b"), Err(Error::InvalidArgument { .. })));
}

#[test]
fn versions_decode_both_encodings() {
    assert_eq!(Version::from_code(22809), Version { major: 2, minor: 28, patch: 9 });
    assert_eq!(Version::from_code(2804), Version { major: 2, minor: 8, patch: 4 });
    assert_eq!(Version::from_code(22809).code(), 22809);
    assert_eq!(Version::from_code(2804).code(), 2804);
    // The version of the headers the bindings come from, whichever they are.
    let header = format!("{}.{}.{}", nccl::NCCL_MAJOR, nccl::NCCL_MINOR, nccl::NCCL_PATCH);
    assert_eq!(Version::BINDINGS.to_string(), header);
    let e = too_old("ncclCommSplit", 21800, 21703).to_string();
    assert!(e.contains("ncclCommSplit") && e.contains("2.18.0") && e.contains("2.17.3"), "{e}");
}

#[test]
fn datatypes_and_ops_map_to_nccl_values() {
    assert_eq!(<f32 as DataType>::RAW, nccl::ncclDataType_t::ncclFloat32);
    #[cfg(feature = "half")]
    assert_eq!(<bf16 as DataType>::RAW, nccl::ncclDataType_t::ncclBfloat16);
    #[cfg(feature = "half")]
    assert_eq!(<f16 as DataType>::RAW, nccl::ncclDataType_t::ncclFloat16);
    assert_eq!(<Float8E4M3 as DataType>::RAW, nccl::ncclDataType_t::ncclFloat8e4m3);
    assert_eq!(<u64 as DataType>::RAW, nccl::ncclDataType_t::ncclUint64);
    for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg] {
        assert_eq!(ReduceOp::from_raw(op.as_raw()), Some(op));
    }
    assert_eq!(ReduceOp::from_raw(nccl::ncclRedOp_t(1000)), None);
}

#[test]
fn overlap_and_ranks_are_checked() {
    use super::collective::{disjoint, valid_rank};
    use crate::memory::DeviceView;
    let ctx = crate::context::Context::detached_for_tests();
    // SAFETY: the views are only compared, never read.
    let view = |ptr: u64, len: usize| unsafe { DeviceView::<f32>::from_raw(&ctx, ptr, len) };
    assert!(disjoint::<f32>("t", &view(0x1000, 4), &view(0x1010, 4)).is_ok());
    assert!(disjoint::<f32>("t", &view(0x1010, 4), &view(0x1000, 4)).is_ok());
    assert!(matches!(
        disjoint::<f32>("t", &view(0x1000, 4), &view(0x100c, 4)),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        disjoint::<f32>("t", &view(0x1000, 8), &view(0x1004, 1)),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(valid_rank("t", "root", 1, 2).ok(), Some(1));
    assert!(matches!(valid_rank("t", "root", 2, 2), Err(Error::InvalidArgument { .. })));
}

#[test]
fn without_nccl_calls_say_what_to_install() {
    if nccl::library_error().is_none() {
        return; // NCCL is installed here: the GPU tests cover the calls.
    }
    match UniqueId::new() {
        Err(Error::Load { call, source }) => {
            assert_eq!(call, "ncclGetUniqueId");
            assert!(source.to_string().contains("libnccl.so.2"), "{source}");
        }
        other => unreachable!("expected a load error, got {other:?}"),
    }
    assert!(matches!(version(), Err(Error::Load { .. })));
    assert!(matches!(Group::start(), Err(Error::Load { .. })));
    assert!(!super::group::in_group());
}
