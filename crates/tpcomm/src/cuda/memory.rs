//! The exact memory a CUDA communicator takes.

use crate::units::ByteSize;
use serde::Serialize;

/// One buffer of a communicator.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryItem {
    pub name: String,
    pub bytes: ByteSize,
    /// "device" (GPU memory) or "host" (pinned host memory).
    pub location: &'static str,
}

impl MemoryItem {
    pub fn device(name: &str, bytes: usize) -> Self {
        Self {
            name: name.into(),
            bytes: ByteSize::from_usize(bytes),
            location: "device",
        }
    }
    pub fn host(name: &str, bytes: usize) -> Self {
        Self {
            name: name.into(),
            bytes: ByteSize::from_usize(bytes),
            location: "host",
        }
    }
}

/// Every buffer of one rank, and how the device allocations round up.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryReport {
    pub device: usize,
    pub items: Vec<MemoryItem>,
    /// Sizes of the cuMemAlloc calls (buffers share allocations).
    pub allocations: Vec<ByteSize>,
    /// The driver's allocation granularity for this device
    /// (cuMemGetAllocationGranularity, recommended).
    pub granularity: ByteSize,
    /// Size of the kernel image, loaded once per device and process and
    /// shared by every communicator there (not part of `device_reserved`).
    pub kernel_image: ByteSize,
}

impl MemoryReport {
    /// Bytes of device memory asked for.
    pub fn device_requested(&self) -> ByteSize {
        ByteSize::b(self.allocations.iter().map(|a| a.bytes()).sum())
    }
    /// Device memory the allocations take once rounded to the granularity:
    /// what free memory drops by.
    pub fn device_reserved(&self) -> ByteSize {
        let g = self.granularity.bytes().max(1);
        ByteSize::b(
            self.allocations
                .iter()
                .map(|a| a.bytes().div_ceil(g) * g)
                .sum(),
        )
    }
}

impl std::fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "GPU {} memory taken by the CUDA communicator:",
            self.device
        )?;
        for it in &self.items {
            writeln!(
                f,
                "  {:<32} {:>12} ({} bytes, {})",
                it.name,
                it.bytes.to_string(),
                it.bytes.bytes(),
                it.location
            )?;
        }
        writeln!(
            f,
            "  device total: {} requested, {} reserved at {} granularity (kernel image {} shared per device)",
            self.device_requested(),
            self.device_reserved(),
            self.granularity,
            self.kernel_image
        )
    }
}
