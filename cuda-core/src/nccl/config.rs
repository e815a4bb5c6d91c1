//! [`Config`]: how a communicator is made (`ncclConfig_t`).

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use cuhost_nccl_sys as nccl;
use std::ffi::CString;

/// `NCCL_CONFIG_UNDEF_INT`: the field keeps NCCL's default (or its environment variable).
const UNDEF_INT: i32 = i32::MIN;

/// How the CTAs of a communicator's kernels are chosen (`NCCL_CTA_POLICY_*`, NCCL 2.27).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CtaPolicy {
    /// NCCL's choice.
    Default,
    /// Fewer CTAs for the same bandwidth, leaving SMs to the application.
    Efficiency,
    /// No CTAs where the transfer can be done without them (copy engines, symmetric memory).
    Zero,
}

impl CtaPolicy {
    /// The policy of a raw `NCCL_CTA_POLICY_*` value; `None` for one this crate does not know.
    pub fn from_raw(raw: i32) -> Option<CtaPolicy> {
        [CtaPolicy::Default, CtaPolicy::Efficiency, CtaPolicy::Zero].into_iter().find(|p| p.raw() == raw)
    }

    /// The raw `NCCL_CTA_POLICY_*` value.
    pub fn raw(self) -> i32 {
        match self {
            CtaPolicy::Default => nccl::NCCL_CTA_POLICY_DEFAULT as i32,
            CtaPolicy::Efficiency => nccl::NCCL_CTA_POLICY_EFFICIENCY as i32,
            CtaPolicy::Zero => nccl::NCCL_CTA_POLICY_ZERO as i32,
        }
    }
}

/// The settings of a new communicator
/// ([`ncclConfig_t`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html#ncclconfig-t)),
/// for [`Communicator::init_rank`](super::Communicator::init_rank) and
/// [`Communicator::split`](super::Communicator::split).
///
/// Every field starts undefined, as `NCCL_CONFIG_INITIALIZER` leaves it, so that NCCL uses its
/// default or the matching `NCCL_*` environment variable; each setter defines one. A field newer
/// than the loaded NCCL (the setters say which version brought it) is ignored by it.
///
/// ```
/// use cuhost::nccl::{Config, CtaPolicy};
/// let config = Config::new().blocking(false).max_ctas(16).net_name("IB")?.cta_policy(CtaPolicy::Efficiency);
/// assert_eq!(config.is_blocking(), Some(false));
/// # Ok::<(), cuhost::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    blocking: Option<bool>,
    cga_cluster_size: Option<i32>,
    min_ctas: Option<i32>,
    max_ctas: Option<i32>,
    net_name: Option<CString>,
    split_share: Option<bool>,
    traffic_class: Option<i32>,
    comm_name: Option<CString>,
    collnet_enable: Option<bool>,
    cta_policy: Option<CtaPolicy>,
    shrink_share: Option<bool>,
    nvls_ctas: Option<i32>,
    channels_per_net_peer: Option<i32>,
    nvlink_centric_scheduling: Option<bool>,
}

fn c_text(operation: &'static str, text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::invalid(operation, format!("{text:?} holds a NUL byte")))
}

impl Config {
    /// A configuration with every field undefined (NCCL's defaults).
    pub fn new() -> Config {
        Config::default()
    }

    /// Whether NCCL calls on the communicator wait (`true`, NCCL's default) or return while NCCL
    /// still works in the background (`false`; see
    /// [`Communicator::wait`](super::Communicator::wait)).
    pub fn blocking(mut self, blocking: bool) -> Config {
        self.blocking = Some(blocking);
        self
    }

    /// The CGA (thread block cluster) size of NCCL's kernels, 0 to 8 (`cgaClusterSize`).
    pub fn cga_cluster_size(mut self, size: i32) -> Config {
        self.cga_cluster_size = Some(size);
        self
    }

    /// The fewest CTAs NCCL may use (`minCTAs`).
    pub fn min_ctas(mut self, ctas: i32) -> Config {
        self.min_ctas = Some(ctas);
        self
    }

    /// The most CTAs NCCL may use (`maxCTAs`).
    pub fn max_ctas(mut self, ctas: i32) -> Config {
        self.max_ctas = Some(ctas);
        self
    }

    /// The network NCCL uses between hosts, e.g. `"IB"` or `"Socket"` (`netName`). Text with a
    /// NUL byte is an [`Error::InvalidArgument`].
    pub fn net_name(mut self, name: &str) -> Result<Config> {
        self.net_name = Some(c_text("Config::net_name", name)?);
        Ok(self)
    }

    /// Whether a communicator made by [`split`](super::Communicator::split) shares its
    /// parent's resources (`splitShare`, NCCL 2.18).
    pub fn split_share(mut self, share: bool) -> Config {
        self.split_share = Some(share);
        self
    }

    /// The network traffic class (`trafficClass`, NCCL 2.22).
    pub fn traffic_class(mut self, class: i32) -> Config {
        self.traffic_class = Some(class);
        self
    }

    /// A name for the communicator in NCCL's logs and profiler (`commName`). Text with a NUL
    /// byte is an [`Error::InvalidArgument`].
    pub fn comm_name(mut self, name: &str) -> Result<Config> {
        self.comm_name = Some(c_text("Config::comm_name", name)?);
        Ok(self)
    }

    /// Whether CollNet (in-network reductions) may be used (`collnetEnable`).
    pub fn collnet_enable(mut self, enable: bool) -> Config {
        self.collnet_enable = Some(enable);
        self
    }

    /// How many CTAs NCCL's kernels use (`CTAPolicy`, NCCL 2.27).
    pub fn cta_policy(mut self, policy: CtaPolicy) -> Config {
        self.cta_policy = Some(policy);
        self
    }

    /// Whether a communicator made by shrinking shares its parent's resources
    /// (`shrinkShare`, NCCL 2.27).
    pub fn shrink_share(mut self, share: bool) -> Config {
        self.shrink_share = Some(share);
        self
    }

    /// The CTAs of NVLink SHARP operations (`nvlsCTAs`, NCCL 2.27).
    pub fn nvls_ctas(mut self, ctas: i32) -> Config {
        self.nvls_ctas = Some(ctas);
        self
    }

    /// The channels per network peer (`nChannelsPerNetPeer`, NCCL 2.28).
    pub fn channels_per_net_peer(mut self, channels: i32) -> Config {
        self.channels_per_net_peer = Some(channels);
        self
    }

    /// Whether scheduling favours NVLink (`nvlinkCentricSched`, NCCL 2.28).
    pub fn nvlink_centric_scheduling(mut self, enable: bool) -> Config {
        self.nvlink_centric_scheduling = Some(enable);
        self
    }

    /// The blocking mode set, or `None` for NCCL's default (blocking, unless
    /// `NCCL_COMM_BLOCKING=0` is set).
    pub fn is_blocking(&self) -> Option<bool> {
        self.blocking
    }

    /// Whether every field is undefined.
    pub(crate) fn is_default(&self) -> bool {
        *self == Config::default()
    }

    /// The C struct, initialised as `NCCL_CONFIG_INITIALIZER` does (size, magic, the version of
    /// the header the bindings came from, every field undefined) with the fields set here. The
    /// name pointers point into `self`, which must outlive the NCCL call that reads them.
    pub fn to_raw(&self) -> nccl::ncclConfig_t {
        let int = |v: Option<i32>| v.unwrap_or(UNDEF_INT);
        let flag = |v: Option<bool>| v.map_or(UNDEF_INT, i32::from);
        let text = |v: &Option<CString>| v.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        // Every field the header declares starts undefined, including those of NCCL releases
        // newer than this crate knows; only the ones set here change.
        let mut raw = nccl::NCCL_CONFIG_INITIALIZER;
        raw.blocking = flag(self.blocking);
        raw.cgaClusterSize = int(self.cga_cluster_size);
        raw.minCTAs = int(self.min_ctas);
        raw.maxCTAs = int(self.max_ctas);
        raw.netName = text(&self.net_name);
        raw.splitShare = flag(self.split_share);
        raw.trafficClass = int(self.traffic_class);
        raw.commName = text(&self.comm_name);
        raw.collnetEnable = flag(self.collnet_enable);
        raw.CTAPolicy = self.cta_policy.map_or(UNDEF_INT, CtaPolicy::raw);
        raw.shrinkShare = flag(self.shrink_share);
        raw.nvlsCTAs = int(self.nvls_ctas);
        raw.nChannelsPerNetPeer = int(self.channels_per_net_peer);
        raw.nvlinkCentricSched = flag(self.nvlink_centric_scheduling);
        raw
    }
}
