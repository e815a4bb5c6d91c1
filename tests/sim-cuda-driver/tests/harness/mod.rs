//! Runs programs against the simulator: two worker threads, one step at a time. `cuda-core`
//! tells the simulator itself, through its checking hooks, when a pool hands a block to a new
//! owner and when the host takes a slice of pinned memory.
#![allow(dead_code)]

pub mod program;
pub mod sim;
pub mod world;

use program::{Program, Step};
use sim::Sim;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, MutexGuard, PoisonError};
use world::World;

type Job = Box<dyn FnOnce() + Send>;

fn worker(jobs: Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        job();
    }
}

/// The two threads and the world, one program at a time.
pub struct Harness {
    workers: [Sender<Job>; 2],
    world: Option<World>,
}

/// What a program did: reports of (a)–(c), of (d), the crate's errors, the graph launches it
/// refused while a guard was held, the reports in words.
#[derive(Debug)]
pub struct Outcome {
    pub bugs: [u64; 3],
    pub races: u64,
    pub errors: Vec<String>,
    pub refused: u64,
    pub text: String,
}

impl Outcome {
    /// Whether the program shows a hole in the crate (a report in (a)–(c)) or an error.
    pub fn fails(&self) -> bool {
        self.bugs.iter().any(|&n| n > 0) || !self.errors.is_empty()
    }
}

static HARNESS: Mutex<Option<Harness>> = Mutex::new(None);

/// The harness, for one test at a time (the simulator is one per process).
pub fn harness() -> MutexGuard<'static, Option<Harness>> {
    let mut guard = HARNESS.lock().unwrap_or_else(PoisonError::into_inner);
    if guard.is_none() {
        Sim::get();
        let spawn = || {
            let (tx, rx) = channel::<Job>();
            std::thread::spawn(move || worker(rx));
            tx
        };
        let workers = [spawn(), spawn()];
        let mut h = Harness { workers, world: None };
        h.world = Some(h.on(0, World::new));
        *guard = Some(h);
    }
    guard
}

impl Harness {
    /// Runs `f` on thread `t` and returns what it returns.
    fn on<R: Send + 'static>(&self, t: u8, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (tx, rx) = channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        self.workers[usize::from(t)].send(job).unwrap();
        rx.recv().unwrap()
    }

    /// Runs `program` with the simulator seeded by `seed`; with `emulate_h1_fix`, the program
    /// itself orders what the crate's H1 fix orders.
    pub fn run(&mut self, program: &Program, seed: u64, emulate_h1_fix: bool) -> Outcome {
        let sim = Sim::get();
        (sim.reset)(seed);
        let mut world = self.world.take().unwrap();
        world.emulate_h1_fix = emulate_h1_fix;
        for (i, &(thread, step)) in program.iter().enumerate() {
            let t = world.thread_of(thread, &step);
            world = self.on(t, move || {
                (sim.set_step)(i as u32);
                world.apply(t, step);
                world
            });
        }
        let end = program.len() as u32;
        world = self.on(0, move || {
            (sim.set_step)(end);
            world.clear();
            world
        });
        let errors = std::mem::take(&mut world.errors);
        let refused = std::mem::take(&mut world.refused);
        self.world = Some(world);
        let (bugs, races) = sim.counts();
        let text = if bugs.iter().any(|&n| n > 0) || races > 0 { sim.reports() } else { String::new() };
        Outcome { bugs, races, errors, refused, text }
    }

    /// Runs `program` as [`run`](Self::run) does, with the process ordering uses across
    /// streams itself ([`StreamOrdering::Implicit`](cuhost::StreamOrdering)).
    pub fn run_implicit(&mut self, program: &Program, seed: u64) -> Outcome {
        cuhost::stream::set_stream_ordering(cuhost::StreamOrdering::Implicit);
        let out = self.run(program, seed, false);
        cuhost::stream::set_stream_ordering(cuhost::StreamOrdering::Explicit);
        out
    }

    /// The same, with the Rust call stack of each site in the reports.
    pub fn run_with_backtraces(&mut self, program: &Program, seed: u64) -> Outcome {
        (Sim::get().set_backtraces)(1);
        let out = self.run(program, seed, false);
        (Sim::get().set_backtraces)(0);
        out
    }
}

/// Runs a regression program and returns its outcome (printing the reports).
pub fn run_program(program: &[(u8, Step)]) -> Outcome {
    let mut guard = harness();
    let h = guard.as_mut().unwrap();
    let out = h.run(&program.to_vec(), 1, false);
    if out.fails() {
        println!("{}", h.run_with_backtraces(&program.to_vec(), 1).text);
    }
    out
}
