//! Exact accounting of the memory a communicator takes.
//!
//! Every transport allocates all of its buffers when the communicator is
//! created and describes them here, one line per buffer, in exact bytes, so a
//! server can subtract them before it sizes its KV cache.

use crate::error::Result;
use crate::units::ByteSize;
use std::fmt;

/// One buffer of a communicator.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemoryLine {
    /// What the buffer is for.
    pub name: String,
    /// Exact size.
    pub bytes: ByteSize,
    /// How the size was computed (e.g. "2 buffers x 2 ranks x 8 MiB").
    pub detail: String,
}

/// Every buffer a communicator holds, where it lives, and the total.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemoryReport {
    /// Where the memory lives ("host shared memory", "GPU 0", ...).
    pub location: String,
    pub lines: Vec<MemoryLine>,
}

impl MemoryReport {
    /// The sum of all lines.
    pub fn total(&self) -> Result<ByteSize> {
        ByteSize::checked_sum(self.lines.iter().map(|l| l.bytes))
    }
}

impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}:", self.location)?;
        for l in &self.lines {
            writeln!(
                f,
                "  {:<28} {:>12} bytes  ({}; {})",
                l.name,
                l.bytes.bytes(),
                l.bytes,
                l.detail
            )?;
        }
        match self.total() {
            Ok(t) => write!(f, "  {:<28} {:>12} bytes  ({t})", "total", t.bytes()),
            Err(e) => write!(f, "  total: {e}"),
        }
    }
}
