//! The ranks of a multi-process test: this binary started again once per rank, with the
//! variables a launcher sets (`torchrun`'s or Slurm's), `NCCL_NVLS_ENABLE=0` and the test's own.
//! Their output lines are collected by threads, so that the test waits for them with deadlines
//! and a rank that fills its pipes never blocks.

use cuda_tests::{Failed, TestResult};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

/// Set in a child's environment to the part it plays.
pub const ROLE_ENV: &str = "CUDA_CORE_NCCL_CLUSTER_ROLE";

/// Where a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pipe {
    Out,
    Err,
}

/// One line of a rank's output.
pub struct Line {
    pub rank: usize,
    pub pipe: Pipe,
    pub text: String,
}

/// Which launcher's variables the ranks get.
#[derive(Clone, Copy, Debug)]
pub enum Launch {
    Torchrun,
    Slurm,
}

/// The ranks started by a test; killed when dropped.
pub struct Ranks {
    children: Vec<Option<(Child, Option<ChildStdin>)>>,
    lines: Receiver<Line>,
    /// Every line read so far, for the failure messages.
    pub log: Vec<Line>,
}

/// A free TCP port of this host (bound and let go: the tests own the host).
pub fn free_port() -> Result<u16, Failed> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

fn forward(rank: usize, pipe: Pipe, from: impl std::io::Read + Send + 'static, to: Sender<Line>) {
    std::thread::spawn(move || {
        for text in BufReader::new(from).lines().map_while(Result::ok) {
            if to.send(Line { rank, pipe, text }).is_err() {
                break;
            }
        }
    });
}

impl Ranks {
    /// Starts `started` of `ranks` ranks (rank `r` on GPU `r`, all told rank 0 is at
    /// 127.0.0.1:`port`), each in `role(r)`, with `env` added to every child's environment.
    pub fn start(
        launch: Launch,
        ranks: usize,
        started: &[usize],
        port: u16,
        role: impl Fn(usize) -> String,
        env: &[(&str, &str)],
    ) -> Result<Ranks, Failed> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let (to, lines) = channel();
        let mut children: Vec<Option<(Child, Option<ChildStdin>)>> = (0..ranks).map(|_| None).collect();
        for &r in started {
            let mut cmd = Command::new(&exe);
            cmd.env(ROLE_ENV, role(r)).env("NCCL_NVLS_ENABLE", "0");
            match launch {
                Launch::Torchrun => {
                    cmd.env("RANK", r.to_string())
                        .env("WORLD_SIZE", ranks.to_string())
                        .env("LOCAL_RANK", r.to_string())
                        .env("MASTER_ADDR", "127.0.0.1")
                        .env("MASTER_PORT", port.to_string());
                }
                Launch::Slurm => {
                    cmd.env("SLURM_PROCID", r.to_string())
                        .env("SLURM_NTASKS", ranks.to_string())
                        .env("SLURM_LOCALID", r.to_string())
                        .env("SLURM_STEP_NODELIST", "127.0.0.1")
                        .env("SLURM_JOB_ID", "4242")
                        .env("MASTER_PORT", port.to_string());
                }
            }
            for (k, v) in env {
                cmd.env(k, v);
            }
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("could not start rank {r}: {e}"))?;
            let stdin = child.stdin.take();
            let (out, err) = (child.stdout.take(), child.stderr.take());
            if let Some(out) = out {
                forward(r, Pipe::Out, out, to.clone());
            }
            if let Some(err) = err {
                forward(r, Pipe::Err, err, to.clone());
            }
            children[r] = Some((child, stdin));
        }
        Ok(Ranks { children, lines, log: Vec::new() })
    }

    /// The log so far, for a failure message.
    pub fn dump(&self) -> String {
        self.log.iter().map(|l| format!("[rank {} {:?}] {}\n", l.rank, l.pipe, l.text)).collect()
    }

    /// Waits until each of `ranks` has printed a line starting with `prefix` on its standard
    /// output, for at most `limit`; returns the rest of each rank's line, in the order of `ranks`.
    pub fn expect(&mut self, ranks: &[usize], prefix: &str, limit: Duration) -> Result<Vec<String>, Failed> {
        let deadline = Instant::now() + limit;
        let mut found: Vec<Option<String>> = vec![None; ranks.len()];
        // Lines already read count too.
        for l in &self.log {
            if let Some(i) = ranks.iter().position(|&r| r == l.rank) {
                if l.pipe == Pipe::Out && found[i].is_none() {
                    if let Some(rest) = l.text.strip_prefix(prefix) {
                        found[i] = Some(rest.trim().to_string());
                    }
                }
            }
        }
        while found.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if l.pipe == Pipe::Out {
                        if let Some(i) = ranks.iter().position(|&r| r == l.rank) {
                            if found[i].is_none() {
                                if let Some(rest) = l.text.strip_prefix(prefix) {
                                    found[i] = Some(rest.trim().to_string());
                                }
                            }
                        }
                    }
                    self.log.push(l);
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    let missing: Vec<usize> =
                        ranks.iter().zip(&found).filter(|(_, f)| f.is_none()).map(|(r, _)| *r).collect();
                    return Err(format!(
                        "rank(s) {missing:?} did not print {prefix:?} within {limit:?}; their output:\n{}",
                        self.dump()
                    )
                    .into());
                }
            }
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// Writes `line` to rank `rank`'s standard input.
    pub fn send(&mut self, rank: usize, line: &str) -> TestResult {
        let stdin =
            self.children[rank].as_mut().and_then(|(_, s)| s.as_mut()).ok_or("that rank has no stdin")?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing to rank {rank}: {e}"))?;
        Ok(())
    }

    /// Kills rank `rank` with SIGKILL and reaps it.
    pub fn kill(&mut self, rank: usize) -> TestResult {
        let (mut child, _) = self.children[rank].take().ok_or("that rank is not running")?;
        child.kill().map_err(|e| format!("killing rank {rank}: {e}"))?;
        child.wait().map_err(|e| format!("reaping rank {rank}: {e}"))?;
        Ok(())
    }

    /// Waits for `ranks` to exit, for at most `limit` in all; fails unless each exits with 0.
    pub fn finish(&mut self, ranks: &[usize], limit: Duration) -> TestResult {
        let deadline = Instant::now() + limit;
        for &r in ranks {
            let (child, stdin) = self.children[r].as_mut().ok_or("that rank is not running")?;
            drop(stdin.take());
            let status = loop {
                if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
                    break s;
                }
                if Instant::now() >= deadline {
                    self.drain();
                    return Err(format!(
                        "rank {r} has not exited within {limit:?}; output:\n{}",
                        self.dump()
                    )
                    .into());
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            self.children[r] = None;
            if !status.success() {
                // Let the readers catch up with what it printed last.
                std::thread::sleep(Duration::from_millis(200));
                self.drain();
                return Err(format!("rank {r} failed with {status}; output:\n{}", self.dump()).into());
            }
        }
        self.drain();
        Ok(())
    }

    /// Moves the lines read meanwhile into the log.
    pub fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.log.push(l);
        }
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        for (mut child, _) in self.children.iter_mut().filter_map(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
