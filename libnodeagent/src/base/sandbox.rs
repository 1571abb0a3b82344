//! Run one pure computation in a forked child under a memory limit (`RLIMIT_DATA`), so input
//! that makes it allocate without bound ends in an error instead of aborting the agent or
//! exhausting the node. Used for templates: minijinja's `~` and macro recursion build strings
//! that neither fuel nor the output cap sees until they exist.
//!
//! The child inherits the parent's memory (no exec, no re-parse), computes, writes the result
//! to a pipe as JSON and `_exit`s. A Rust allocation failure aborts the child (SIGABRT), which
//! the parent reports as the memory limit; a panic is reported as an internal error.

use serde::{Serialize, de::DeserializeOwned};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};

/// How a sandboxed computation ended.
#[derive(Debug, PartialEq)]
pub enum Outcome<T> {
    Done(T),
    /// The child ran out of its memory limit (it aborted without a result).
    OutOfMemory,
    /// The child used up its CPU time (`RLIMIT_CPU`: SIGXCPU, then SIGKILL).
    OutOfTime,
    /// Anything else: a panic (its message), a signal, a malformed result.
    Failed(String),
}

const RESULT: u8 = b'R';
const PANIC: u8 = b'P';

/// Run `f` in a child limited to `memory_bytes` of data memory and `cpu_secs` seconds of CPU
/// time; its serialised result may be at most `max_result_bytes`. Safe to call from a multi-threaded process: glibc's `fork`
/// keeps malloc usable in the child, and the child touches no other lock before `_exit`.
pub fn run<T: Serialize + DeserializeOwned>(
    memory_bytes: u64,
    cpu_secs: u64,
    max_result_bytes: usize,
    f: impl FnOnce() -> T,
) -> std::io::Result<Outcome<T>> {
    let (read_end, write_end) = nix::unistd::pipe()?;
    // SAFETY: the child only computes, writes to its pipe and calls `_exit` (see above).
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            drop(read_end);
            child(write_end, memory_bytes, cpu_secs, f)
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(write_end);
            parent(read_end, child, max_result_bytes)
        }
    }
}

fn child<T: Serialize>(out: OwnedFd, memory_bytes: u64, cpu_secs: u64, f: impl FnOnce() -> T) -> ! {
    use nix::sys::resource::{Resource, setrlimit};
    let fd = out.as_raw_fd();
    // A panic (release builds abort on panic) says why before the abort.
    std::panic::set_hook(Box::new(move |info| {
        let mut msg = vec![PANIC];
        msg.extend_from_slice(info.to_string().as_bytes());
        // SAFETY: fd is the child's own open pipe end.
        unsafe { libc::write(fd, msg.as_ptr().cast(), msg.len()) };
    }));
    // CPU time, not only fuel: fuel counts instructions, not the work one filter call does
    // on a large string. Soft limit: SIGXCPU; one second later the hard limit: SIGKILL.
    let limits = setrlimit(Resource::RLIMIT_DATA, memory_bytes, memory_bytes)
        .and_then(|()| setrlimit(Resource::RLIMIT_CPU, cpu_secs, cpu_secs.saturating_add(1)));
    let code = match limits {
        // Never unwind past here: the child must not return into the parent's code.
        Ok(()) => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(value) => {
                let mut file = std::fs::File::from(out);
                let mut bytes = vec![RESULT];
                match serde_json::to_writer(&mut bytes, &value) {
                    Ok(()) if file.write_all(&bytes).is_ok() => 0,
                    _ => 2,
                }
            }
            Err(_) => 4,
        },
        Err(_) => 3,
    };
    // SAFETY: ends the child without running the parent's atexit handlers or destructors.
    unsafe { libc::_exit(code) }
}

fn parent<T: DeserializeOwned>(
    read_end: OwnedFd,
    child: nix::unistd::Pid,
    max_result_bytes: usize,
) -> std::io::Result<Outcome<T>> {
    use nix::sys::wait::{WaitStatus, waitpid};
    let mut bytes = Vec::new();
    let read = std::fs::File::from(read_end)
        .take(max_result_bytes as u64 + 2)
        .read_to_end(&mut bytes);
    let status = loop {
        match waitpid(child, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    read?;
    if bytes.len() > max_result_bytes + 1 {
        return Ok(Outcome::Failed(format!(
            "result over {max_result_bytes} bytes"
        )));
    }
    Ok(match (bytes.split_first(), status) {
        (Some((&PANIC, msg)), _) => {
            Outcome::Failed(format!("panicked: {}", String::from_utf8_lossy(msg)))
        }
        (Some((&RESULT, json)), WaitStatus::Exited(_, 0)) => match serde_json::from_slice(json) {
            Ok(v) => Outcome::Done(v),
            Err(e) => Outcome::Failed(format!("malformed result: {e}")),
        },
        (None, WaitStatus::Signaled(_, nix::sys::signal::Signal::SIGABRT, _)) => {
            Outcome::OutOfMemory
        }
        (
            _,
            WaitStatus::Signaled(
                _,
                nix::sys::signal::Signal::SIGXCPU | nix::sys::signal::Signal::SIGKILL,
                _,
            ),
        ) => Outcome::OutOfTime,
        (_, WaitStatus::Signaled(_, sig, _)) => Outcome::Failed(format!("killed by {sig}")),
        (_, WaitStatus::Exited(_, 3)) => Outcome::Failed("could not set its memory limit".into()),
        (_, other) => Outcome::Failed(format!("ended without a result ({other:?})")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn returns_the_result() {
        let r = run(256 * MIB, 60, 1024, || vec!["a".to_string(), "b".into()]).unwrap();
        assert_eq!(r, Outcome::Done(vec!["a".to_string(), "b".into()]));
    }

    #[test]
    fn an_allocation_over_the_limit_is_out_of_memory() {
        let r = run(256 * MIB, 60, 1024, || {
            let mut v: Vec<u8> = Vec::new();
            v.resize(1024 * MIB as usize, 1);
            v.len()
        })
        .unwrap();
        assert_eq!(r, Outcome::OutOfMemory);
    }

    #[test]
    fn a_panic_is_reported_not_continued() {
        let r = run(256 * MIB, 60, 1024, || -> u8 { panic!("boom") }).unwrap();
        assert!(
            matches!(r, Outcome::Failed(ref m) if m.contains("boom")),
            "{r:?}"
        );
    }

    #[test]
    fn a_result_over_the_bound_is_refused() {
        let r = run(256 * MIB, 60, 10, || "x".repeat(100)).unwrap();
        assert!(
            matches!(r, Outcome::Failed(ref m) if m.contains("over 10 bytes")),
            "{r:?}"
        );
    }

    #[test]
    fn a_computation_over_its_cpu_time_is_stopped() {
        let t = std::time::Instant::now();
        let r = run(256 * MIB, 1, 1024, || {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        })
        .unwrap();
        let _: &Outcome<()> = &r;
        assert_eq!(r, Outcome::OutOfTime);
        // One CPU second (more wall time on a loaded machine), far from forever.
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "{:?}",
            t.elapsed()
        );
    }
}
