//! Exact accounting of the memory a communicator takes.
//!
//! Every transport allocates all of its buffers when the communicator is
//! created and describes them here, one line per buffer, in exact bytes, so a
//! server can subtract them before it sizes its KV cache. One report type
//! serves the CPU transport (host shared memory) and the GPU transports
//! (device memory and pinned host memory); a GPU report also says how its
//! device buffers sit in driver allocations, since free memory drops by the
//! allocations rounded to the driver's granularity, not by the buffers.

use crate::error::Result;
use crate::units::ByteSize;
use serde::Serialize;
use std::fmt;

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Place {
    /// A shared-memory segment every CPU rank maps.
    HostShared,
    /// Page-locked host memory, mapped into a GPU's address space.
    PinnedHost,
    /// GPU memory.
    Device,
}

impl Place {
    /// The word a GPU report prints after each line ("host" is pinned: a GPU
    /// communicator holds no other host memory).
    pub const fn label(self) -> &'static str {
        match self {
            Place::HostShared => "host shared",
            Place::PinnedHost => "host",
            Place::Device => "device",
        }
    }
}

/// One buffer of a communicator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryLine {
    /// What the buffer is for.
    pub name: String,
    /// Exact size.
    pub bytes: ByteSize,
    pub place: Place,
    /// How the size was computed (e.g. "2 buffers x 2 ranks x 8 MiB"); may
    /// be empty.
    pub detail: String,
}

impl MemoryLine {
    pub fn new(place: Place, name: impl Into<String>, bytes: ByteSize) -> Self {
        Self {
            name: name.into(),
            bytes,
            place,
            detail: String::new(),
        }
    }

    /// GPU memory of `bytes` (a size the CUDA calls took as usize).
    pub fn device(name: &str, bytes: usize) -> Self {
        Self::new(Place::Device, name, ByteSize::from_usize(bytes))
    }

    /// Pinned host memory of `bytes`.
    pub fn pinned_host(name: &str, bytes: usize) -> Self {
        Self::new(Place::PinnedHost, name, ByteSize::from_usize(bytes))
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }
}

/// How a GPU communicator's device buffers map onto driver allocations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuAllocations {
    /// The CUDA device ordinal.
    pub device: usize,
    /// Sizes of the cuMemAlloc calls (buffers share allocations).
    pub allocations: Vec<ByteSize>,
    /// The driver's allocation granularity for this device
    /// (cuMemGetAllocationGranularity, recommended).
    pub granularity: ByteSize,
    /// Size of the kernel image, loaded once per device and process and
    /// shared by every communicator there (not part of `device_reserved`).
    pub kernel_image: ByteSize,
}

/// Every buffer a communicator holds, where it lives, and the totals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryReport {
    /// What the report covers; its heading.
    pub title: String,
    pub lines: Vec<MemoryLine>,
    /// Present for GPU communicators.
    pub gpu: Option<GpuAllocations>,
}

impl MemoryReport {
    /// The report of a CPU communicator's shared segment.
    pub fn host_shared(title: impl Into<String>, lines: Vec<MemoryLine>) -> Self {
        Self {
            title: title.into(),
            lines,
            gpu: None,
        }
    }

    /// The report of one GPU rank's communicator; `what` names it (e.g. "the
    /// CUDA communicator", "the host-path communicator").
    pub fn gpu(what: &str, lines: Vec<MemoryLine>, gpu: GpuAllocations) -> Self {
        Self {
            title: format!("GPU {} memory taken by {what}", gpu.device),
            lines,
            gpu: Some(gpu),
        }
    }

    /// The sum of all lines.
    pub fn total(&self) -> Result<ByteSize> {
        Ok(ByteSize::checked_sum(self.lines.iter().map(|l| l.bytes))?)
    }

    /// The sum of the lines that live in `place`.
    pub fn total_in(&self, place: Place) -> Result<ByteSize> {
        Ok(ByteSize::checked_sum(
            self.lines
                .iter()
                .filter(|l| l.place == place)
                .map(|l| l.bytes),
        )?)
    }

    /// Bytes of device memory asked for (zero without GPU allocations).
    pub fn device_requested(&self) -> ByteSize {
        let Some(g) = &self.gpu else {
            return ByteSize::b(0);
        };
        ByteSize::b(g.allocations.iter().map(|a| a.bytes()).sum())
    }

    /// Device memory the allocations take once rounded to the granularity:
    /// what free memory drops by (zero without GPU allocations).
    pub fn device_reserved(&self) -> ByteSize {
        let Some(g) = &self.gpu else {
            return ByteSize::b(0);
        };
        let gran = g.granularity.bytes().max(1);
        ByteSize::b(
            g.allocations
                .iter()
                .map(|a| a.bytes().div_ceil(gran) * gran)
                .sum(),
        )
    }
}

// The two layouts are the ones each transport printed before the report was
// one type (bench logs show the GPU one); a GPU report ends with a newline, a
// host one does not.
impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}:", self.title)?;
        let Some(g) = &self.gpu else {
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
            return match self.total() {
                Ok(t) => write!(f, "  {:<28} {:>12} bytes  ({t})", "total", t.bytes()),
                Err(e) => write!(f, "  total: {e}"),
            };
        };
        for l in &self.lines {
            writeln!(
                f,
                "  {:<32} {:>12} ({} bytes, {})",
                l.name,
                l.bytes.to_string(),
                l.bytes.bytes(),
                l.place.label()
            )?;
        }
        writeln!(
            f,
            "  device total: {} requested, {} reserved at {} granularity (kernel image {} shared per device)",
            self.device_requested(),
            self.device_reserved(),
            g.granularity,
            g.kernel_image
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_report() -> MemoryReport {
        MemoryReport::gpu(
            "the CUDA communicator",
            vec![
                MemoryLine::device("receive slots (2 epochs)", 3 << 20),
                MemoryLine::device("control words (epoch, abort)", 4096),
                MemoryLine::pinned_host("status (pinned, mapped)", 64),
            ],
            GpuAllocations {
                device: 1,
                allocations: vec![ByteSize::b((3 << 20) + 4096)],
                granularity: ByteSize::mib(2),
                kernel_image: ByteSize::kib(300),
            },
        )
    }

    #[test]
    fn gpu_report_rounds_allocations_up_to_the_granularity() {
        let r = gpu_report();
        assert_eq!(r.device_requested(), ByteSize::b((3 << 20) + 4096));
        assert_eq!(r.device_reserved(), ByteSize::mib(4));
        assert_eq!(
            r.total_in(Place::Device).unwrap(),
            ByteSize::b((3 << 20) + 4096)
        );
        assert_eq!(r.total_in(Place::PinnedHost).unwrap(), ByteSize::b(64));
        assert_eq!(r.total_in(Place::HostShared).unwrap(), ByteSize::b(0));
        assert_eq!(r.total().unwrap(), ByteSize::b((3 << 20) + 4096 + 64));
    }

    #[test]
    fn gpu_report_prints_one_line_per_buffer_and_the_device_totals() {
        let text = gpu_report().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "GPU 1 memory taken by the CUDA communicator:");
        assert_eq!(lines.len(), 5, "{text}");
        assert!(
            lines[1].starts_with("  receive slots (2 epochs) "),
            "{text}"
        );
        assert!(lines[1].ends_with(" (3145728 bytes, device)"), "{text}");
        assert!(lines[3].ends_with(" (64 bytes, host)"), "{text}");
        assert!(lines[4].starts_with("  device total: "), "{text}");
        assert!(
            lines[4].contains(&format!("{} reserved", ByteSize::mib(4))),
            "{text}"
        );
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn host_report_totals_every_line_and_has_no_device_memory() {
        let r = MemoryReport::host_shared(
            "host shared memory",
            vec![
                MemoryLine::new(Place::HostShared, "header", ByteSize::b(4096))
                    .with_detail("id, sizes"),
                MemoryLine::new(Place::HostShared, "data slots", ByteSize::mib(32)),
            ],
        );
        assert_eq!(r.total().unwrap(), ByteSize::b(4096 + (32 << 20)));
        assert_eq!(r.device_requested(), ByteSize::b(0));
        assert_eq!(r.device_reserved(), ByteSize::b(0));
        let text = r.to_string();
        assert!(text.starts_with("host shared memory:\n"), "{text}");
        assert!(text.contains("        4096 bytes  ("), "{text}");
        assert!(text.contains("; id, sizes)"), "{text}");
        let last = text.lines().last().unwrap();
        assert!(last.starts_with("  total "), "{text}");
        assert!(
            last.contains(&format!("{} bytes", 4096 + (32 << 20))),
            "{text}"
        );
        assert!(!text.ends_with('\n'));
    }

    #[test]
    fn a_total_that_overflows_is_an_error_not_a_wrapped_number() {
        let big = MemoryLine::new(Place::HostShared, "big", ByteSize::b(u64::MAX));
        let r = MemoryReport::host_shared("x", vec![big.clone(), big]);
        assert!(r.total().is_err());
        assert!(r.to_string().contains("total: "));
    }
}
