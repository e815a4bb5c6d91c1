//! `cuhost::nccl` on four GPUs: every collective and a ring of sends and receives, in one
//! process and in four processes started with a launcher's variables (`torchrun`'s, Slurm's)
//! through `Bootstrap`; a split into two pairs; the same over NCCL's socket transport alone
//! (its bandwidth printed); and the faults: a rank that never starts, one that never joins
//! NCCL, one killed in the middle of a loop of collectives, each ending in an error on the
//! others within a set time, the killed one followed by recovery among the others.
//!
//! Every test needs four devices and is reported ignored with fewer. The ranks of the
//! multi-process tests are this binary started again (`ROLE_ENV` names the part), with
//! `NCCL_NVLS_ENABLE=0` in every child's environment. Each test is bounded in time: the fault
//! tests finish within about a minute.

mod nccl_cluster {
    pub mod cases;
    pub mod check;
    pub mod roles;
    pub mod spawn;
}

use cuda_tests::multi_gpu;
use nccl_cluster::{cases, roles, spawn};

fn main() {
    // SAFETY: nothing else runs yet in this process, so nothing reads the environment meanwhile.
    unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    if let Ok(role) = std::env::var(spawn::ROLE_ENV) {
        roles::child_main(&role);
    }
    cuda_tests::run(&[
        multi_gpu("one_process_four_gpus_every_collective", 4, cases::one_process_four_gpus_every_collective),
        multi_gpu("one_process_four_gpus_split_into_pairs", 4, cases::one_process_four_gpus_split_into_pairs),
        multi_gpu(
            "four_processes_every_collective_and_split",
            4,
            cases::four_processes_every_collective_and_split,
        ),
        multi_gpu("four_processes_from_slurm_variables", 4, cases::four_processes_from_slurm_variables),
        multi_gpu("four_processes_over_sockets", 4, cases::four_processes_over_sockets),
        multi_gpu(
            "a_rank_that_never_starts_times_out_the_others",
            4,
            cases::a_rank_that_never_starts_times_out_the_others,
        ),
        multi_gpu(
            "a_rank_that_never_joins_nccl_times_out_the_others",
            4,
            cases::a_rank_that_never_joins_nccl_times_out_the_others,
        ),
        multi_gpu("a_killed_rank_is_shrunk_away", 4, cases::a_killed_rank_is_shrunk_away),
        multi_gpu(
            "a_killed_rank_is_shrunk_away_over_sockets",
            4,
            cases::a_killed_rank_is_shrunk_away_over_sockets,
        ),
        multi_gpu(
            "a_killed_rank_is_replaced_by_a_new_communicator",
            4,
            cases::a_killed_rank_is_replaced_by_a_new_communicator,
        ),
    ]);
}
