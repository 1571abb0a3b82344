//! Shared by the harden_* tests: run the agent as a child with a deadline, so a hostile input
//! that hangs it fails the test instead of the suite.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Wait for `child` (stdout/stderr piped or null), killing it once `limit` has passed since
/// `start`. Returns its output and whether it had to be killed.
pub fn wait_or_kill(mut child: Child, start: Instant, limit: Duration) -> (Output, bool) {
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), false);
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            return (child.wait_with_output().unwrap(), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
