//! CPU tests of what needs no GPU: ids, configurations, versions, datatypes.

use super::version::too_old;
use super::*;
use crate::error::Error;
use cuhost_nccl_sys as nccl;

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

mod launchers {
    use super::super::bootstrap::first_host;
    use super::super::fault::excluded_ranks;
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn from(pairs: &[(&str, &str)]) -> crate::Result<Bootstrap> {
        let v = vars(pairs);
        Bootstrap::from_vars(move |name| v.get(name).cloned())
    }

    fn refused(pairs: &[(&str, &str)], says: &str) {
        match from(pairs) {
            Err(Error::InvalidArgument { operation, message, .. }) => {
                assert_eq!(operation, "Bootstrap::from_env");
                assert!(message.contains(says), "{message:?} does not say {says:?}");
            }
            other => unreachable!("expected a refusal saying {says:?}, got {other:?}"),
        }
    }

    #[test]
    fn torchrun_variables_make_a_bootstrap() {
        let b = from(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node7"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "run-1"),
            ("SLURM_PROCID", "0"),
        ])
        .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!((b.rank(), b.ranks(), b.local_rank()), (3, 4, 1));
        assert_eq!((b.address(), b.job_name(), b.launcher()), ("node7:29500", "run-1", Launcher::Torchrun));
        assert_eq!(b.time_limit(), DEFAULT_TIMEOUT);
        let v6 = from(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "::1"),
            ("MASTER_PORT", "1"),
        ]);
        assert_eq!(v6.map(|b| b.address().to_string()).ok().as_deref(), Some("[::1]:1"));
    }

    #[test]
    fn slurm_variables_make_a_bootstrap_with_or_without_master() {
        let slurm = [
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_STEP_NODELIST", "gpu[07-08,11],login1"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_STEP_ID", "2"),
        ];
        let b = from(&slurm).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!((b.rank(), b.ranks(), b.local_rank(), b.launcher()), (5, 8, 1, Launcher::Slurm));
        assert_eq!(b.job_name(), "slurm-1234.2");
        let port = (20000 + 1234 * 7 + 2).to_string(); // 8640 is below 10000
        assert_eq!(b.address(), format!("gpu07:{port}"));
        // The same on every rank of the step, and a different port for another step.
        let again = from(&slurm).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(again.address(), b.address());
        let mut next = slurm;
        next[5] = ("SLURM_STEP_ID", "3");
        assert_ne!(from(&next).map(|b| b.address().to_string()).ok().as_deref(), Some(b.address()));
        let mut with_master = slurm.to_vec();
        with_master.extend([("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29400")]);
        assert_eq!(
            from(&with_master).map(|b| b.address().to_string()).ok().as_deref(),
            Some("10.0.0.1:29400")
        );
        // MASTER_PORT alone: rank 0 is on the step's first node, at that port.
        let mut with_port = slurm.to_vec();
        with_port.push(("MASTER_PORT", "29500"));
        assert_eq!(from(&with_port).map(|b| b.address().to_string()).ok().as_deref(), Some("gpu07:29500"));
    }

    #[test]
    fn open_mpi_variables_need_master() {
        let ompi = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ];
        refused(&ompi, "MASTER_ADDR");
        let mut with_master = ompi.to_vec();
        with_master.extend([("MASTER_ADDR", "h"), ("MASTER_PORT", "2")]);
        let b = from(&with_master).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!((b.rank(), b.ranks(), b.launcher(), b.address()), (1, 2, Launcher::OpenMpi, "h:2"));
    }

    #[test]
    fn bad_launcher_variables_are_refused_with_the_variable_to_set() {
        refused(&[], "no launcher variables");
        let base = [("WORLD_SIZE", "4"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "29500")];
        refused(&base, "RANK is missing");
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            v
        };
        refused(&with(&[("RANK", "x")]), "RANK is \"x\"");
        refused(&with(&[("RANK", "4")]), "rank 4 is not below the rank count 4");
        refused(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")], "MASTER_ADDR and MASTER_PORT");
        refused(
            &[("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "h")],
            "MASTER_PORT is not",
        );
        refused(
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "1"),
                ("LOCAL_RANK", "0"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "0"),
            ],
            "not a port number",
        );
        refused(
            &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1"), ("SLURM_LOCALID", "0")],
            "SLURM_STEP_NODELIST",
        );
        assert!(matches!(Bootstrap::new(0, 2, 0, "no-port"), Err(Error::InvalidArgument { .. })));
        assert!(matches!(Bootstrap::new(0, 2, 2, "h:1"), Err(Error::InvalidArgument { .. })));
        assert!(matches!(Bootstrap::new(0, 0, 0, "h:1"), Err(Error::InvalidArgument { .. })));
    }

    #[test]
    fn slurm_host_lists_give_their_first_host() {
        assert_eq!(first_host("node[01-04,07],gpu5").as_deref(), Some("node01"));
        assert_eq!(first_host("a1,b2").as_deref(), Some("a1"));
        assert_eq!(first_host("single").as_deref(), Some("single"));
        assert_eq!(first_host("rack[3,5]-n[10-12]").as_deref(), Some("rack3-n10"));
        assert_eq!(first_host(""), None);
    }

    #[test]
    fn shrink_lists_are_checked_and_ranks_renumbered() {
        assert_eq!(excluded_ranks("t", &[3, 1], 4, 0).ok(), Some(vec![3, 1]));
        for (list, me) in [(&[][..], 0), (&[4][..], 0), (&[2][..], 2), (&[1, 1][..], 0)] {
            assert!(
                matches!(excluded_ranks("t", list, 4, me), Err(Error::InvalidArgument { .. })),
                "{list:?}"
            );
        }
        assert_eq!(rank_after_shrink(3, &[1, 1]), Some(2));
        assert_eq!(rank_after_shrink(2, &[3]), Some(2));
        assert_eq!(rank_after_shrink(3, &[3]), None);
    }

    #[test]
    fn timeouts_and_rendezvous_errors_say_what_failed() {
        let e = Error::Timeout {
            operation: "Communicator::synchronize",
            waited: std::time::Duration::from_millis(2500),
            message: "a peer may have died".into(),
        };
        assert_eq!(e.to_string(), "Communicator::synchronize gave up after 2.5 s: a peer may have died");
        let e = Error::Rendezvous { operation: "Bootstrap::unique_id", message: "refused".into() };
        assert_eq!(e.to_string(), "Bootstrap::unique_id: refused");
    }
}

mod rendezvous {
    use super::super::rendezvous::{HELLO_BYTES, Hello, Join, MAGIC, Serve, VERSION, job_key, join, serve};
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    fn id() -> UniqueId {
        let bytes: Vec<u8> = (0..UniqueId::BYTES).map(|i| (i * 13 + 1) as u8).collect();
        UniqueId::from_bytes(&bytes).unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn listener() -> (TcpListener, String) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| unreachable!("{e}"));
        let address = l.local_addr().map(|a| a.to_string()).unwrap_or_else(|e| unreachable!("{e}"));
        (l, address)
    }

    /// Rank 0 serving `ranks` ranks of job `job` in a thread, for `timeout`.
    fn serving(
        l: TcpListener,
        ranks: usize,
        job: &str,
        timeout: Duration,
    ) -> std::thread::JoinHandle<crate::Result<()>> {
        let job = job_key(job);
        std::thread::spawn(move || {
            let id = id();
            let s = Serve { id: &id, ranks, job, deadline: Instant::now() + timeout, timeout };
            serve("test", &l, &s)
        })
    }

    fn hello(ranks: u64, rank: u64, job: &str) -> Hello {
        Hello { version: VERSION, ranks, rank, job: job_key(job) }
    }

    fn joining(
        address: &str,
        h: Hello,
        timeout: Duration,
    ) -> std::thread::JoinHandle<crate::Result<UniqueId>> {
        let address = address.to_string();
        std::thread::spawn(move || {
            join("test", &Join { address: &address, hello: h, deadline: Instant::now() + timeout, timeout })
        })
    }

    fn finished<T>(h: std::thread::JoinHandle<T>) -> T {
        h.join().unwrap_or_else(|_| unreachable!("a rendezvous thread panicked"))
    }

    /// Sends `bytes` one at a time, `pause` apart, for as long as the other side reads.
    fn trickle(stream: &mut TcpStream, bytes: &[u8], pause: Duration) {
        for b in bytes {
            if stream.write_all(std::slice::from_ref(b)).is_err() {
                return;
            }
            std::thread::sleep(pause);
        }
    }

    /// M3: a peer that sends its hello a byte at a time, each within the socket's time limit
    /// of one read, cannot hold rank 0 past the rendezvous's deadline (it had 40 × 100 ms).
    #[test]
    fn a_peer_that_trickles_its_hello_does_not_stretch_the_deadline() {
        let (l, address) = listener();
        let start = Instant::now();
        let server = serving(l, 2, "j", Duration::from_millis(300));
        let mut slow = TcpStream::connect(&address).unwrap_or_else(|e| unreachable!("{e}"));
        let bytes = hello(2, 1, "j").encode();
        let trickler = std::thread::spawn(move || trickle(&mut slow, &bytes, Duration::from_millis(100)));
        assert!(matches!(finished(server), Err(Error::Timeout { .. })));
        assert!(start.elapsed() < Duration::from_millis(2500), "rank 0 waited {:?}", start.elapsed());
        finished(trickler);
    }

    /// M3: a rank 0 that trickles its answer cannot hold a joining rank past its deadline.
    #[test]
    fn an_answer_trickled_byte_by_byte_does_not_stretch_the_deadline() {
        let (l, address) = listener();
        let fake = std::thread::spawn(move || {
            let (mut peer, _) = l.accept().unwrap_or_else(|e| unreachable!("{e}"));
            let mut answer = MAGIC.to_vec();
            answer.extend_from_slice(&VERSION.to_le_bytes());
            answer.extend_from_slice(&0u32.to_le_bytes());
            answer.extend_from_slice(&[7; UniqueId::BYTES]);
            trickle(&mut peer, &answer, Duration::from_millis(50));
        });
        let start = Instant::now();
        let joined = finished(joining(&address, hello(2, 1, "j"), Duration::from_millis(300)));
        assert!(matches!(joined, Err(Error::Timeout { .. })), "{joined:?}");
        assert!(start.elapsed() < Duration::from_millis(2500), "the rank waited {:?}", start.elapsed());
        finished(fake);
    }

    #[test]
    fn hellos_round_trip_and_others_are_not_hellos() {
        let h = hello(4, 3, "job");
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        let mut wrong = h.encode();
        wrong[0] = b'X';
        assert_eq!(Hello::decode(&wrong), None);
        assert_eq!(&h.encode()[..8], &MAGIC);
        assert_ne!(job_key("a"), job_key("b"));
    }

    #[test]
    fn four_ranks_get_the_id() {
        let (l, address) = listener();
        let limit = Duration::from_secs(20);
        // The others start first and retry until rank 0 listens... here it listens already,
        // and they come in any order.
        let peers: Vec<_> = (1..4).rev().map(|r| joining(&address, hello(4, r, "j"), limit)).collect();
        let server = serving(l, 4, "j", limit);
        for p in peers {
            assert_eq!(finished(p).ok(), Some(id()));
        }
        assert!(finished(server).is_ok());
    }

    #[test]
    fn wrong_peers_are_refused_and_the_right_ones_still_join() {
        let (l, address) = listener();
        let limit = Duration::from_secs(20);
        let server = serving(l, 3, "job-a", limit);
        // A connection that does not speak the protocol is closed and forgotten.
        let mut stranger = TcpStream::connect(&address).unwrap_or_else(|e| unreachable!("{e}"));
        let _ = stranger.write_all(&[0u8; HELLO_BYTES]);
        let refusal = |h: Hello, says: &str| match finished(joining(&address, h, limit)) {
            Err(Error::Rendezvous { message, .. }) => assert!(message.contains(says), "{message}"),
            other => unreachable!("expected a refusal saying {says:?}, got {other:?}"),
        };
        refusal(hello(4, 1, "job-a"), "started for 4 ranks");
        refusal(hello(3, 1, "job-b"), "another job");
        refusal(hello(3, 0, "job-a"), "claims rank 0");
        refusal(hello(3, 7, "job-a"), "not below the rank count");
        refusal(Hello { version: VERSION + 1, ..hello(3, 1, "job-a") }, "protocol version");
        let first = joining(&address, hello(3, 1, "job-a"), limit);
        // Rank 1 again, once the first has joined: refused as a duplicate.
        std::thread::sleep(Duration::from_millis(300));
        refusal(hello(3, 1, "job-a"), "already joined");
        let second = joining(&address, hello(3, 2, "job-a"), limit);
        assert_eq!(finished(first).ok(), Some(id()));
        assert_eq!(finished(second).ok(), Some(id()));
        assert!(finished(server).is_ok());
    }

    #[test]
    fn a_rank_that_never_comes_times_out_everywhere() {
        let (l, address) = listener();
        let limit = Duration::from_secs(2);
        let start = Instant::now();
        let server = serving(l, 4, "", limit);
        let peers: Vec<_> = [1, 2].iter().map(|&r| joining(&address, hello(4, r, ""), limit * 3)).collect();
        match finished(server) {
            Err(Error::Timeout { message, waited, .. }) => {
                assert!(message.contains("[3]"), "{message}");
                assert_eq!(waited, limit);
            }
            other => unreachable!("expected a time-out, got {other:?}"),
        }
        for p in peers {
            match finished(p) {
                Err(Error::Timeout { message, .. }) => assert!(message.contains("[3]"), "{message}"),
                other => unreachable!("expected a time-out, got {other:?}"),
            }
        }
        assert!(start.elapsed() < limit + Duration::from_secs(2), "{:?}", start.elapsed());
    }

    #[test]
    fn a_rank_0_that_never_listens_times_out() {
        let (l, address) = listener();
        drop(l);
        let limit = Duration::from_millis(800);
        let start = Instant::now();
        match finished(joining(&address, hello(2, 1, ""), limit)) {
            Err(Error::Timeout { message, .. }) => assert!(message.contains("did not accept"), "{message}"),
            other => unreachable!("expected a time-out, got {other:?}"),
        }
        assert!(start.elapsed() < limit + Duration::from_secs(2), "{:?}", start.elapsed());
    }

    #[test]
    fn a_bootstrap_rank_joins_through_the_environment() {
        let (l, address) = listener();
        let limit = Duration::from_secs(20);
        let server = serving(l, 2, "run-9", limit);
        let (host, port) = address.rsplit_once(':').unwrap_or_else(|| unreachable!("{address}"));
        let vars = std::collections::HashMap::from([
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", host),
            ("MASTER_PORT", port),
            ("TORCHELASTIC_RUN_ID", "run-9"),
        ]);
        let b = Bootstrap::from_vars(|n| vars.get(n).map(|v| v.to_string()))
            .unwrap_or_else(|e| unreachable!("{e}"))
            .timeout(limit);
        assert_eq!(b.unique_id().ok(), Some(id()));
        assert!(finished(server).is_ok());
    }
}

#[test]
fn a_timeout_too_long_for_an_instant_means_no_deadline() {
    use std::time::{Duration, Instant};
    let far = super::handle::deadline_after(Duration::MAX);
    assert!(far > Instant::now() + Duration::from_secs(100 * 365 * 86_400), "{far:?}");
    let near = super::handle::deadline_after(Duration::from_secs(1));
    assert!(near <= Instant::now() + Duration::from_secs(1));
}

#[test]
fn a_bootstrap_without_a_time_limit_does_not_panic() {
    // Rank 0 of 1 serves nobody; making the id then fails here (no NCCL is loaded by the CPU
    // tests) or succeeds: either way, after the deadline was worked out from Duration::MAX.
    let free = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr());
    let port = free.map_or(29_517, |a| a.port());
    let bootstrap =
        Bootstrap::new(0, 1, 0, &format!("127.0.0.1:{port}")).unwrap_or_else(|e| unreachable!("{e}"));
    let run = || bootstrap.timeout(std::time::Duration::MAX).unique_id().is_ok();
    assert!(std::panic::catch_unwind(run).is_ok(), "the deadline of Duration::MAX panicked");
}
