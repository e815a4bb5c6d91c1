//! `cuhost::nccl` on two GPUs: every collective against values computed on the host (for
//! f32, i32 and bf16), in-place forms and refused arguments, pre-multiplied sums, a ring of
//! sends and receives in a group, a split clique, registered NCCL memory, simulated groups,
//! non-blocking initialisation completed by polling, an abort that ends a collective that can
//! never complete, and two processes with one rank each (this binary re-run as the second
//! process, the unique id sent through a pipe).
//!
//! Every test needs two devices and is reported ignored with fewer. The tests share the two
//! GPUs, so they run one at a time. NVLink SHARP stays off (`NCCL_NVLS_ENABLE=0`), here and in
//! the child process.

mod nccl {
    pub mod collectives;
    pub mod common;
    pub mod lifecycle;
    pub mod processes;
}

use cuda_tests::{gpu, multi_gpu};
use nccl::{collectives, lifecycle, processes};

fn main() {
    // SAFETY: nothing else runs yet in this process, so nothing reads the environment meanwhile.
    unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    if std::env::var_os(processes::CHILD_ENV).is_some() {
        processes::child_main();
    }
    cuda_tests::run(&[
        multi_gpu(
            "all_reduce_matches_the_host_for_every_op",
            2,
            collectives::all_reduce_matches_the_host_for_every_op,
        ),
        multi_gpu("every_collective_matches_the_host", 2, collectives::every_collective_matches_the_host),
        multi_gpu("in_place_forms_match_the_host", 2, collectives::in_place_forms_match_the_host),
        multi_gpu(
            "bad_arguments_are_refused_before_the_call",
            2,
            collectives::bad_arguments_are_refused_before_the_call,
        ),
        multi_gpu("pre_mul_sum_scales_before_summing", 2, collectives::pre_mul_sum_scales_before_summing),
        multi_gpu("fp8_sums_where_the_library_and_device_have_them", 2, collectives::fp8_sums),
        multi_gpu("send_recv_ring_in_a_group", 2, collectives::send_recv_ring_in_a_group),
        multi_gpu(
            "all_to_all_gather_and_scatter_move_blocks",
            2,
            collectives::all_to_all_gather_and_scatter_move_blocks,
        ),
        multi_gpu("split_reorders_and_drops_ranks", 2, lifecycle::split_reorders_and_drops_ranks),
        multi_gpu("registered_nccl_memory_reduces", 2, lifecycle::registered_nccl_memory_reduces),
        multi_gpu(
            "simulated_group_estimates_and_runs_nothing",
            2,
            lifecycle::simulated_group_estimates_and_runs_nothing,
        ),
        multi_gpu(
            "non_blocking_init_completes_by_polling",
            2,
            lifecycle::non_blocking_init_completes_by_polling,
        ),
        multi_gpu(
            "abort_ends_a_collective_that_cannot_complete",
            2,
            lifecycle::abort_ends_a_collective_that_cannot_complete,
        ),
        gpu("unique_id_and_version", lifecycle::unique_id_and_version),
        multi_gpu("two_processes_one_rank_each", 2, processes::two_processes_one_rank_each),
    ]);
}
