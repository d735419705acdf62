//! Every environment variable tpcomm reads, declared once: name, type,
//! accepted range, default and a line of documentation, in the spirit of
//! NCCL's `NCCL_PARAM`. Every reader (the library, the drop-in, the command
//! and the tests) goes through a [`Var`] of this module, so a value is
//! parsed by one parser, and a bad value is an error naming the variable and
//! what it accepts, never a silent default. docs/environment.md is checked
//! against [`ALL`] by a test (`docs_list_exactly_the_registry`).
//!
//! An empty value is the same as unset. Values are trimmed; words (booleans,
//! choices) are compared without regard to case.

pub use crate::error::EnvError;
use crate::units::ByteSize;
use std::ffi::OsString;

mod kinds;
pub use kinds::*;

/// Where a variable belongs (the sections of docs/environment.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    /// Where libraries and files are.
    Paths,
    /// Behaviour of the library.
    Library,
    /// Behaviour of the drop-in `libtpcomm_nccl.so`.
    DropIn,
    /// Launch shapes other than the rules, for measuring.
    Shapes,
    /// The test suites.
    Tests,
    /// Set by tpcomm for processes it starts itself.
    Internal,
    /// Variables of the system and of other software that tpcomm consults.
    Standard,
}

impl Section {
    pub const ALL: [Section; 7] = [
        Section::Paths,
        Section::Library,
        Section::DropIn,
        Section::Shapes,
        Section::Tests,
        Section::Internal,
        Section::Standard,
    ];

    /// The heading of the section in docs/environment.md.
    pub fn title(self) -> &'static str {
        match self {
            Section::Paths => "Finding libraries and files",
            Section::Library => "Behaviour of the library",
            Section::DropIn => "Drop-in library (`libtpcomm_nccl.so`; docs/drop-in.md)",
            Section::Shapes => "Measuring other launch shapes",
            Section::Tests => "Tests",
            Section::Internal => "Set by tpcomm itself (do not set)",
            Section::Standard => "Standard variables tpcomm consults",
        }
    }
}

/// One environment variable.
#[derive(Debug)]
pub struct Var<P> {
    pub name: &'static str,
    pub section: Section,
    /// Who reads it and when (for the documentation).
    pub read_by: &'static str,
    /// What unset means.
    pub default: &'static str,
    pub doc: &'static str,
    pub kind: P,
}

impl<P: Parse> Var<P> {
    /// Parses `raw` as this variable's value; empty (after trimming) is `None`.
    pub fn parse(&self, raw: &str) -> Result<Option<P::Value>, EnvError> {
        let t = raw.trim();
        if t.is_empty() {
            return Ok(None);
        }
        self.kind
            .parse(t)
            .map(Some)
            .ok_or_else(|| EnvError::Invalid {
                name: self.name,
                value: raw.to_string(),
                accepted: self.kind.accepted(),
            })
    }

    /// The value in an environment given as a lookup (tests pass a map).
    pub fn read_with(
        &self,
        get: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Option<P::Value>, EnvError> {
        let Some(raw) = get(self.name) else {
            return Ok(None);
        };
        match raw.to_str() {
            Some(s) => self.parse(s),
            None => match self.kind.parse_os(&raw) {
                Some(v) => Ok(Some(v)),
                None => Err(EnvError::NotUnicode {
                    name: self.name,
                    accepted: self.kind.accepted(),
                }),
            },
        }
    }

    /// The value in this process's environment (read now).
    pub fn get(&self) -> Result<Option<P::Value>, EnvError> {
        self.read_with(|n| std::env::var_os(n))
    }

    /// The value, or `default` when unset.
    pub fn get_or(&self, default: P::Value) -> Result<P::Value, EnvError> {
        Ok(self.get()?.unwrap_or(default))
    }

    /// The value for code that runs after [`check_library`] accepted the
    /// environment at creation: a bad value there is reported by that
    /// check, and reads as unset here.
    pub fn checked_value(&self) -> Option<P::Value> {
        self.get().ok().flatten()
    }
}

/// What the documentation and the creation check need of any variable.
pub trait Entry: Sync {
    fn name(&self) -> &'static str;
    fn section(&self) -> Section;
    fn read_by(&self) -> &'static str;
    fn default(&self) -> &'static str;
    fn doc(&self) -> &'static str;
    fn accepted(&self) -> String;
    /// Whether the value in the environment given by `get` is valid.
    fn check_with(&self, get: &dyn Fn(&str) -> Option<OsString>) -> Result<(), EnvError>;
}

impl<P: Parse> Entry for Var<P> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn section(&self) -> Section {
        self.section
    }
    fn read_by(&self) -> &'static str {
        self.read_by
    }
    fn default(&self) -> &'static str {
        self.default
    }
    fn doc(&self) -> &'static str {
        self.doc
    }
    fn accepted(&self) -> String {
        self.kind.accepted()
    }
    fn check_with(&self, get: &dyn Fn(&str) -> Option<OsString>) -> Result<(), EnvError> {
        self.read_with(get).map(|_| ())
    }
}

// ---- Finding libraries and files -------------------------------------------

pub static NVRTC_LIBRARY: Var<Path> = Var {
    name: "TPCOMM_NVRTC_LIBRARY",
    section: Section::Paths,
    read_by: "the library (first GPU use)",
    default: "search `LD_LIBRARY_PATH`, the CUDA toolkit and Python wheels",
    doc: "path of `libnvrtc.so` to use instead of searching",
    kind: Path,
};

pub static NCCL_LIBRARY: Var<Path> = Var {
    name: "TPCOMM_NCCL_LIBRARY",
    section: Section::Paths,
    read_by: "the library (`tpcomm::nccl`)",
    default: "the sonames, then pip's and conda's folders",
    doc: "path of `libnccl.so.2` for the NCCL baseline and fallback",
    kind: Path,
};

pub static CACHE_DIR: Var<Path> = Var {
    name: "TPCOMM_CACHE_DIR",
    section: Section::Paths,
    read_by: "the library (kernel compilation)",
    default: "`$XDG_CACHE_HOME/tpcomm`, else `~/.cache/tpcomm`",
    doc: "where compiled kernels are cached",
    kind: Path,
};

pub static TUNING_TABLE: Var<Path> = Var {
    name: "TPCOMM_TUNING_TABLE",
    section: Section::Paths,
    read_by: "communicator creation (`select::for_this_machine`), the drop-in, `tpcomm explain`, `tune`, `bench --algos auto`",
    default: "`$XDG_CONFIG_HOME/tpcomm/tuning/<fingerprint>.toml` when it exists",
    doc: "tuning table to route with when none is passed explicitly (docs/selection.md, docs/tuning.md)",
    kind: Path,
};

// ---- Behaviour of the library ------------------------------------------------

pub static NCCL_FALLBACK: Var<Flag> = Var {
    name: "TPCOMM_NCCL_FALLBACK",
    section: Section::Library,
    read_by: "`CudaConfig::new`",
    default: "off",
    doc: "`cuda::Communicator` hands NCCL the calls its kernels cannot take (above `max_bytes`, max/min) instead of failing them",
    kind: Flag,
};

pub static CHECK_CALLS: Var<Flag> = Var {
    name: "TPCOMM_CHECK_CALLS",
    section: Section::Library,
    read_by: "`CudaConfig::new`",
    default: "the library: on when two ranks of the group share a GPU, off when every rank has its own; the drop-in: on in every communicator it creates, standalone or beside NCCL (docs/drop-in.md)",
    doc: "every GPU call sends its peers what it is and compares theirs, so ranks that call with different counts, types or algorithms get `Error::Mismatch` instead of wrong sums; cost about 0.45 us per small call in a CUDA graph on an H200 and an H100 with the check on a thread that also had data; it now runs on a spare thread (P2P and host path), not yet measured; off costs 1-3% (docs/protocol-gpu.md, call words). Every rank must end up with the same setting",
    kind: Flag,
};

pub static SELF_TUNE: Var<Flag> = Var {
    name: "TPCOMM_SELF_TUNE",
    section: Section::Library,
    read_by: "`CudaConfig::new`",
    default: "off",
    doc: "time one-shot and two-shot when a communicator without a table is created (well under a second; docs/tuning.md)",
    kind: Flag,
};

pub static WIRE: Var<WireKind> = Var {
    name: "TPCOMM_WIRE",
    section: Section::Library,
    read_by: "`cuda::Communicator::new` (when `CudaConfig::wire` is `None`), the drop-in, `tpcomm explain`",
    default: "exact",
    doc: "sums travel quantized on the wire (docs/quantized.md), from `TPCOMM_WIRE_MIN_BYTES` up",
    kind: WireKind,
};

pub static WIRE_MIN_BYTES: Var<Size> = Var {
    name: "TPCOMM_WIRE_MIN_BYTES",
    section: Section::Library,
    read_by: "as `TPCOMM_WIRE`",
    default: "1 MiB",
    doc: "smallest sum the quantized wire takes (smaller ones are latency-bound and stay exact)",
    kind: Size {
        min: ByteSize::b(0),
        max: ByteSize::gib(1024),
    },
};

// ---- Drop-in -----------------------------------------------------------------

pub static DISABLE: Var<Flag> = Var {
    name: "TPCOMM_DISABLE",
    section: Section::DropIn,
    read_by: "the drop-in (first call)",
    default: "off",
    doc: "on: pure pass-through to the real NCCL",
    kind: Flag,
};

pub static LOG: Var<Choice> = Var {
    name: "TPCOMM_LOG",
    section: Section::DropIn,
    read_by: "the drop-in (first call)",
    default: "warn",
    doc: "`warn`: errors and one line per communicator; `info`: also one line per set-up step and per first call of each size class and route; `off`: nothing",
    kind: Choice(&["off", "warn", "info"]),
};

pub static STANDALONE: Var<Flag> = Var {
    name: "TPCOMM_STANDALONE",
    section: Section::DropIn,
    read_by: "the drop-in (first call)",
    default: "unset: auto",
    doc: "on: `ncclGetUniqueId` returns a standalone id and communicators made with one are served by tpcomm alone, with no real NCCL under them (one host); off: never standalone; unset (auto): NCCL's ids, and a communicator whose ranks are all on one host and share a GPU (which NCCL refuses) is served standalone, found by a census at creation (docs/standalone.md)",
    kind: Flag,
};

pub static STANDALONE_WAIT_S: Var<Seconds> = Var {
    name: "TPCOMM_STANDALONE_WAIT_S",
    section: Section::DropIn,
    read_by: "the drop-in (first call)",
    default: "5",
    doc: "auto standalone mode: how long rank 0 waits at communicator creation for the other ranks of its host to say which GPU they are on; when not all come (ranks on other hosts, or later ones) the communicator is NCCL's",
    kind: Seconds {
        min_ms: 1,
        max_s: 3600,
    },
};

pub static REAL_NCCL: Var<Path> = Var {
    name: "TPCOMM_REAL_NCCL",
    section: Section::DropIn,
    read_by: "the drop-in (first call)",
    default:
        "the next NCCL in the process, an already loaded `libnccl.so.2`, then tpcomm's NCCL search",
    doc: "path of the real NCCL to forward to (by-path mode)",
    kind: Path,
};

pub static RUNTIME_DIR: Var<Path> = Var {
    name: "TPCOMM_RUNTIME_DIR",
    section: Section::DropIn,
    read_by: "the drop-in (first call)",
    default: "the first directory of `$XDG_RUNTIME_DIR`, `$TMPDIR`, `/dev/shm`, the system's temporary directory",
    doc: "where standalone ranks meet (each communicator makes a directory of its own under it, mode 0700): give every rank the same one where they do not share the default, as ranks in separate containers with a shared mount",
    kind: Path,
};

pub static MAX_BYTES: Var<Size> = Var {
    name: "TPCOMM_MAX_BYTES",
    section: Section::DropIn,
    read_by: "the drop-in (first call)",
    default: "16 MiB",
    doc: "largest all-reduce tpcomm takes; buffers, and the staging buffer for unaligned calls, are sized by it",
    kind: Size {
        min: ByteSize::kib(4),
        max: ByteSize::gib(4),
    },
};

pub static TIMEOUT_S: Var<Seconds> = Var {
    name: "TPCOMM_TIMEOUT_S",
    section: Section::DropIn,
    read_by: "the drop-in (first call)",
    default: "600 (PyTorch's NCCL watchdog default)",
    doc: "bound on every wait of a tpcomm call and of the set-up exchange",
    kind: Seconds {
        min_ms: 1,
        max_s: 7 * 24 * 3600,
    },
};

// ---- Launch shapes -----------------------------------------------------------

/// The most threads per block any kernel of tpcomm launches; the kernels'
/// own limit (checked at creation) may be lower.
pub const MAX_BLOCK: u64 = 1024;

pub static P2P_BLOCK: Var<Count> = Var {
    name: "TPCOMM_P2P_BLOCK",
    section: Section::Shapes,
    read_by: "communicator creation",
    default: "what every kernel can launch",
    doc: "cap on threads per block of the P2P kernels (and at most the kernels' limit; with call words on, a launch whose threads would each have a vector gets one warp more within this cap, else one block more, for the check)",
    kind: Count {
        min: 32,
        max: MAX_BLOCK,
        step: 32,
    },
};

pub static FUSED_SPREAD: Var<Flag> = Var {
    name: "TPCOMM_FUSED_SPREAD",
    section: Section::Shapes,
    read_by: "communicator creation",
    default: "spread for a single row only (measured faster there, slower from 8 rows)",
    doc: "the fused all-reduce + RMSNorm kernel's stores to the peers: on: spread over up to one block per SM; off: by each row's block",
    kind: Flag,
};

pub static HOST_BLOCK: Var<Count> = Var {
    name: "TPCOMM_HOST_BLOCK",
    section: Section::Shapes,
    read_by: "communicator creation",
    default: "blocks of 128 threads and up spread over the SMs, as the P2P one-shot",
    doc: "threads per block of the host path's one-pass kernels (and at most the kernels' limit; with call words on, a launch whose threads would each have a vector gets one warp more within the kernels' limit, else one block more, for the check)",
    kind: Count {
        min: 32,
        max: MAX_BLOCK,
        step: 32,
    },
};

pub static HOST_CHUNK: Var<Size> = Var {
    name: "TPCOMM_HOST_CHUNK",
    section: Section::Shapes,
    read_by: "communicator creation",
    default: "by message size (docs/host-gpu.md)",
    doc: "chunk size of the host path's chunked all-reduce and of its all-gather, reduce-scatter and broadcast (rounded to whole 16 KiB)",
    kind: Size {
        min: ByteSize::kib(16),
        max: ByteSize::kib(256),
    },
};

pub static HOST_PRODUCERS: Var<Count> = Var {
    name: "TPCOMM_HOST_PRODUCERS",
    section: Section::Shapes,
    read_by: "communicator creation",
    default: "by message size and SM count",
    doc: "producer blocks of the host path's chunked all-reduce and of its collectives (clamped to the SMs)",
    kind: Count {
        min: 1,
        max: 4096,
        step: 1,
    },
};

pub static HOST_CONSUMERS: Var<Count> = Var {
    name: "TPCOMM_HOST_CONSUMERS",
    section: Section::Shapes,
    read_by: "communicator creation",
    default: "by message size and SM count (the all-reduce: at most 16 a rank up to 4 MiB; the all-gather: at most 16 per GPU, shared among its ranks)",
    doc: "consumer blocks of the host path's chunked all-reduce and of its collectives (clamped to the SMs)",
    kind: Count {
        min: 1,
        max: 4096,
        step: 1,
    },
};

pub static QUANT_BLOCKS: Var<Count> = Var {
    name: "TPCOMM_QUANT_BLOCKS",
    section: Section::Shapes,
    read_by: "communicator creation",
    default: "by message size and the GPU's residency cap (one-shot: a block per 4 steps, at least half the cap)",
    doc: "blocks per rank of a quantized one-shot or two-shot call (at most one per step or chunk, clamped to the residency cap)",
    kind: Count {
        min: 1,
        max: 4096,
        step: 1,
    },
};

// ---- Tests ---------------------------------------------------------------------

pub static GPU_TESTS: Var<Flag> = Var {
    name: "TPCOMM_GPU_TESTS",
    section: Section::Tests,
    read_by: "the GPU tests",
    default: "off: the GPU tests pass as skipped, saying so",
    doc: "run the GPU tests",
    kind: Flag,
};

pub static STRESS_CALLS: Var<Count> = Var {
    name: "TPCOMM_STRESS_CALLS",
    section: Section::Tests,
    read_by: "the GPU stress tests",
    default: "100000",
    doc: "calls of the GPU stress tests",
    kind: Count {
        min: 1,
        max: 1_000_000_000,
        step: 1,
    },
};

pub static REPLAYS: Var<Count> = Var {
    name: "TPCOMM_REPLAYS",
    section: Section::Tests,
    read_by: "the graph replay test",
    default: "10000",
    doc: "graph replays of the replay test",
    kind: Count {
        min: 1,
        max: 1_000_000_000,
        step: 1,
    },
};

pub static TEST_WORLDS: Var<List> = Var {
    name: "TPCOMM_TEST_WORLDS",
    section: Section::Tests,
    read_by: "the GPU tests",
    default: "every GPU (two ranks sharing it on a machine of one GPU)",
    doc: "the world sizes the GPU tests run at; ranks go round-robin over the GPUs",
    kind: List {
        min: 2,
        // crate::transport::MAX_WORLD, spelt out; a test holds them equal.
        max: 8,
    },
};

pub static REQUIRE_NVRTC: Var<Flag> = Var {
    name: "TPCOMM_REQUIRE_NVRTC",
    section: Section::Tests,
    read_by: "the NVRTC tests",
    default: "off",
    doc: "the NVRTC compile tests fail instead of skipping when NVRTC is missing (`scripts/test.sh` sets it)",
    kind: Flag,
};

// ---- Internal --------------------------------------------------------------------

pub static BENCH_WORKER: Var<Text> = Var {
    name: "TPCOMM_BENCH_WORKER",
    section: Section::Internal,
    read_by: "`tpcomm bench` worker processes",
    default: "unset: not a worker",
    doc: "the rank and run a worker process of `tpcomm bench` serves",
    kind: Text,
};

pub static JOB_KEY: Var<Text> = Var {
    name: "TPCOMM_JOB_KEY",
    section: Section::Library,
    read_by: "the CPU rendezvous and the GPU ranks' directory rendezvous",
    default: "unset: threads of one process share a key in memory; processes need one",
    doc: "the job's secret, 32 hex digits, the same in every rank of one job (`tpcomm` sets a fresh one for the ranks it starts)",
    kind: Text,
};

// ---- Standard ----------------------------------------------------------------------

pub static HOME: Var<Path> = Var {
    name: "HOME",
    section: Section::Standard,
    read_by: "the library",
    default: "none",
    doc: "`~/.cache/tpcomm` (kernel cache), `~/.config/tpcomm` (tuning tables), pip's user folders (NCCL search)",
    kind: Path,
};

pub static XDG_CACHE_HOME: Var<Path> = Var {
    name: "XDG_CACHE_HOME",
    section: Section::Standard,
    read_by: "the library",
    default: "`~/.cache`",
    doc: "the kernel cache is `$XDG_CACHE_HOME/tpcomm`",
    kind: Path,
};

pub static XDG_CONFIG_HOME: Var<Path> = Var {
    name: "XDG_CONFIG_HOME",
    section: Section::Standard,
    read_by: "the library",
    default: "`~/.config`",
    doc: "tuning tables are found under `$XDG_CONFIG_HOME/tpcomm/tuning` (an absolute path only)",
    kind: Path,
};

pub static VIRTUAL_ENV: Var<Path> = Var {
    name: "VIRTUAL_ENV",
    section: Section::Standard,
    read_by: "the library (NCCL search)",
    default: "none",
    doc: "the active Python environment, searched for pip's NCCL",
    kind: Path,
};

pub static CONDA_PREFIX: Var<Path> = Var {
    name: "CONDA_PREFIX",
    section: Section::Standard,
    read_by: "the library (NCCL search)",
    default: "none",
    doc: "the active conda environment, searched for NCCL",
    kind: Path,
};

pub static NCCL_P2P_DISABLE: Var<Text> = Var {
    name: "NCCL_P2P_DISABLE",
    section: Section::Standard,
    read_by: "`tpcomm bench forward` (recorded in its report)",
    default: "NCCL's",
    doc: "NCCL's own; changes NCCL's rows and the NCCL side of the drop-in, not tpcomm's kernels; recorded with the results",
    kind: Text,
};

pub static NCCL_COMM_ID: Var<Text> = Var {
    name: "NCCL_COMM_ID",
    section: Section::Standard,
    read_by: "the drop-in (first call)",
    default: "NCCL's",
    doc: "NCCL's own (rank 0's address, so that ranks may each make their own unique id); set: auto standalone mode leaves NCCL's ids unmarked, since the ranks may not share one id",
    kind: Text,
};

pub static NCCL_COMM_BLOCKING: Var<Text> = Var {
    name: "NCCL_COMM_BLOCKING",
    section: Section::Standard,
    read_by: "the drop-in (first call)",
    default: "NCCL's (blocking)",
    doc: "NCCL's own; 0 or 1 overrides a config's `blocking` in the drop-in's standalone creations as it does in NCCL (0: `ncclCommInitRank` is non-blocking too); other values leave the config to decide",
    kind: Text,
};

/// Every variable, in the order of the documentation.
pub static ALL: &[&dyn Entry] = &[
    &NVRTC_LIBRARY,
    &NCCL_LIBRARY,
    &CACHE_DIR,
    &TUNING_TABLE,
    &NCCL_FALLBACK,
    &CHECK_CALLS,
    &SELF_TUNE,
    &WIRE,
    &WIRE_MIN_BYTES,
    &DISABLE,
    &LOG,
    &REAL_NCCL,
    &STANDALONE,
    &STANDALONE_WAIT_S,
    &RUNTIME_DIR,
    &MAX_BYTES,
    &TIMEOUT_S,
    &P2P_BLOCK,
    &FUSED_SPREAD,
    &HOST_BLOCK,
    &HOST_CHUNK,
    &HOST_PRODUCERS,
    &HOST_CONSUMERS,
    &QUANT_BLOCKS,
    &GPU_TESTS,
    &STRESS_CALLS,
    &REPLAYS,
    &TEST_WORLDS,
    &REQUIRE_NVRTC,
    &BENCH_WORKER,
    &JOB_KEY,
    &HOME,
    &XDG_CACHE_HOME,
    &XDG_CONFIG_HOME,
    &VIRTUAL_ENV,
    &CONDA_PREFIX,
    &NCCL_P2P_DISABLE,
    &NCCL_COMM_ID,
    &NCCL_COMM_BLOCKING,
];

/// The sections whose variables a communicator's creation checks.
const CHECKED_AT_CREATION: [Section; 3] = [Section::Paths, Section::Library, Section::Shapes];

/// Checks every variable of the library (paths, behaviour, launch shapes) in
/// the environment given by `get`; the first bad one is the error.
pub fn check_library_with(get: &dyn Fn(&str) -> Option<OsString>) -> Result<(), EnvError> {
    ALL.iter()
        .filter(|v| CHECKED_AT_CREATION.contains(&v.section()))
        .try_for_each(|v| v.check_with(get))
}

/// [`check_library_with`] this process's environment: called when a
/// communicator is created, so a bad value fails the creation.
pub fn check_library() -> crate::error::Result<()> {
    check_library_with(&|n| std::env::var_os(n)).map_err(crate::error::Error::from)
}

/// docs/environment.md's tables, generated from [`ALL`].
pub fn markdown_tables() -> String {
    let mut out = String::new();
    for s in Section::ALL {
        let vars: Vec<&&dyn Entry> = ALL.iter().filter(|v| v.section() == s).collect();
        if vars.is_empty() {
            continue;
        }
        out.push_str(&format!("## {}\n\n", s.title()));
        out.push_str("| variable | takes | unset | read by | meaning |\n");
        out.push_str("| --- | --- | --- | --- | --- |\n");
        for v in vars {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                v.name(),
                v.accepted().replace('|', "\\|"),
                v.default(),
                v.read_by(),
                v.doc()
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
