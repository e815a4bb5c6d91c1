//! A child process of the running test binary, spoken to by lines: the multi-process tests (IPC,
//! checkpoint) start their own binary again with an environment variable naming the child's
//! part, write it lines on its stdin and read its answers from its stdout.

use crate::{Failed, TestResult, ensure};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// A child of this test binary; killed if dropped before [`finish`](Self::finish).
pub struct Child {
    process: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    finished: bool,
}

impl Child {
    /// Starts this binary again with `env` set to `role` (and `NCCL_NVLS_ENABLE=0`, as every
    /// process on the GPU hosts keeps it), its stdin and stdout piped to the test.
    pub fn spawn(env: &str, role: &str) -> Result<Child, Failed> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut process = Command::new(exe)
            .env(env, role)
            .env("NCCL_NVLS_ENABLE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("could not start the child: {e}"))?;
        let stdin = process.stdin.take();
        let stdout = process.stdout.take().ok_or("the child has no stdout")?;
        Ok(Child { process, stdin, stdout: BufReader::new(stdout), finished: false })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// How the child exited, if it has; never waits.
    pub fn exited(&mut self) -> Result<Option<std::process::ExitStatus>, Failed> {
        Ok(self.process.try_wait().map_err(|e| e.to_string())?)
    }

    /// Writes `line` to the child's stdin.
    pub fn send(&mut self, line: &str) -> TestResult {
        let stdin = self.stdin.as_mut().ok_or("the child's stdin is closed")?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing to the child: {e}"))?;
        Ok(())
    }

    /// The child's next line, trimmed; an error when it ended without one.
    pub fn receive(&mut self) -> Result<String, Failed> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).map_err(|e| format!("reading from the child: {e}"))?;
        if n == 0 {
            let status = self.process.wait().map_err(|e| e.to_string())?;
            return Err(format!("the child ended without answering ({status})").into());
        }
        Ok(line.trim().to_string())
    }

    /// Closes the child's stdin and fails unless it exits with 0.
    pub fn finish(mut self) -> TestResult {
        drop(self.stdin.take());
        let status = self.process.wait().map_err(|e| e.to_string())?;
        self.finished = true;
        ensure!(status.success(), "the child failed: {status}");
        Ok(())
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }
}
