//! Standalone mode's ground (docs/standalone.md): a unique id that real NCCL
//! never sees, the rendezvous of a communicator's ranks through its bytes on
//! this host, and the refusals' text. The rest of the folder:
//!
//! - comm.rs: a standalone communicator's state;
//! - create.rs: creating one (ncclCommInitRank, ncclCommSplit);
//! - registry.rs: the handles of the communicators this mode serves;
//! - collectives.rs: the calls on tpcomm's collective kernels;
//! - gathered.rs: the other types and ops, reduced from gathered blocks;
//! - rooted.rs, rooted_plan.rs: ncclReduce, ncclGather, ncclScatter and
//!   ncclAlltoAll, planned as steps of those byte-exact paths;
//! - p2p.rs, p2p_plan.rs: ncclSend and ncclRecv, a group's calls run at
//!   its end as an all-to-all-v of the same steps;
//! - premul.rs: the pre-multiplied sums (ncclRedOpCreatePreMulSum) made on one;
//! - auto_mode.rs: TPCOMM_STANDALONE=auto, where a census at creation
//!   decides between real NCCL and this mode.
//!
//! The id is NCCL's 128 opaque bytes: a magic, a 128-bit secret from the
//! operating system's random source, and the creator's pid. The program
//! passes it from rank to rank itself (torch.distributed through its store),
//! as it does a real id. Ranks meet in a directory named after a hash of the
//! secret, under this user's runtime directory, created mode 0700 and
//! accepted only as a real directory of this user that nobody else may enter;
//! records are written and read as the CUDA rendezvous writes them (mode 0600
//! files of this user, no links followed) and each carries a tag derived from
//! the secret, so a record of another job, or of anyone who knows only the
//! directory's name, is refused by name. This is the shared-memory
//! rendezvous's rule (a job key's hash in every header, files only this user
//! can write), with the key carried in the id instead of TPCOMM_JOB_KEY.

pub(crate) mod args;
pub(crate) mod auto_mode;
pub(crate) mod collectives;
pub(crate) mod comm;
pub(crate) mod create;
pub(crate) mod gathered;
pub(crate) mod launch_gate;
pub(crate) mod p2p;
pub(crate) mod p2p_plan;
pub(crate) mod premul;
pub(crate) mod registry;
pub(crate) mod rooted;
pub(crate) mod rooted_plan;

use std::ffi::c_int;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use tpcomm::cuda::{Rendezvous, Turn};
use tpcomm::hash::mix;
use tpcomm::{Error, Result};

/// The first 8 bytes of a standalone id.
pub const MAGIC: &[u8; 8] = b"TPCSTND1";
/// `ncclInvalidUsage`: what a call standalone mode cannot serve returns.
pub const INVALID_USAGE: c_int = 5;

/// A standalone unique id's secret, parsed from the id.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Secret([u8; 16]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(tag {:016x})", self.tag(0))
    }
}

impl Secret {
    fn words(&self) -> [u64; 2] {
        let w = |r: std::ops::Range<usize>| {
            u64::from_le_bytes(self.0[r].try_into().unwrap_or_default())
        };
        [w(0..8), w(8..16)]
    }

    /// A 64-bit value derived from the secret and `salt`. It names the
    /// meeting directory (salt 0) and tags records (salt 1); neither gives
    /// the secret away.
    pub fn tag(&self, salt: u64) -> u64 {
        let [a, b] = self.words();
        let x = mix(a ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x7470_636f_6d6d_5341);
        mix(x ^ b.rotate_left(29)) ^ mix(b ^ x.rotate_left(13))
    }
}

impl Secret {
    /// A secret of its own for a communicator made from this one's
    /// (ncclCommSplit: `salt` names the split and the colour); it gives
    /// neither this secret nor a sibling's away.
    pub fn derive(&self, salt: u64) -> Secret {
        let a = self.tag(salt.wrapping_mul(2).wrapping_add(2));
        let b = self.tag(salt.wrapping_mul(2).wrapping_add(3));
        let mut s = [0u8; 16];
        s[..8].copy_from_slice(&a.to_le_bytes());
        s[8..].copy_from_slice(&b.to_le_bytes());
        if s == [0u8; 16] {
            s[0] = 1;
        }
        Secret(s)
    }
}

/// Fills `buf` from the kernel's random source.
fn random_bytes(buf: &mut [u8]) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: getrandom writes at most `len` bytes to the live buffer
        // slice it is given.
        let n = unsafe {
            libc::getrandom(
                buf[done..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - done,
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::io("getrandom for a standalone unique id", e));
        }
        done += n as usize;
    }
    Ok(())
}

impl Secret {
    /// A fresh secret from the kernel's random source (never all zeros).
    pub fn random() -> Result<Secret> {
        let mut s = [0u8; 16];
        while s == [0u8; 16] {
            random_bytes(&mut s)?;
        }
        Ok(Secret(s))
    }

    /// The secret of these bytes; `None` for all zeros (no id carries that).
    pub fn from_bytes(b: [u8; 16]) -> Option<Secret> {
        (b != [0u8; 16]).then_some(Secret(b))
    }

    /// The bytes an id carries.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }
}

/// A new standalone unique id (what ncclGetUniqueId will return in
/// standalone mode).
pub fn new_id() -> Result<[u8; 128]> {
    let mut id = [0u8; 128];
    id[..8].copy_from_slice(MAGIC);
    id[8..24].copy_from_slice(&Secret::random()?.to_bytes());
    id[24..28].copy_from_slice(&std::process::id().to_le_bytes());
    id[28..36].copy_from_slice(&host_hash().to_le_bytes());
    Ok(id)
}

/// A 64-bit hash of this machine's key (`host::key`: FNV-1a, then mixed);
/// never 0.
pub fn host_hash() -> u64 {
    let h = crate::host::key()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        });
    mix(h).max(1)
}

/// Refuses at once a standalone id made on another host (its bytes carry
/// the creator's [`host_hash`]): its ranks could never meet, since the
/// meeting place is a directory of this host. `Err` says what to do.
pub fn check_host(id: &[u8; 128]) -> std::result::Result<(), String> {
    let made_on = u64::from_le_bytes(id[28..36].try_into().unwrap_or_default());
    if made_on == 0 || made_on == host_hash() {
        Ok(())
    } else {
        Err(format!(
            "the standalone unique id was made on another host (host tag {made_on:016x}, this one {:016x}); standalone mode serves the ranks of one host: unset TPCOMM_STANDALONE to use NCCL across hosts",
            host_hash()
        ))
    }
}

/// The secret of a standalone id; `None` for any other 128 bytes (a real
/// NCCL id, which starts with NCCL's own data and never with the magic).
pub fn parse(id: &[u8; 128]) -> Option<Secret> {
    if &id[..8] != MAGIC {
        return None;
    }
    Secret::from_bytes(id[8..24].try_into().ok()?)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The directory ranks of `secret` meet in, under `base` (this user's
/// runtime directory by default: see [`runtime_base`]); created if missing.
/// Refused unless it is a real directory (not a link) owned by this user
/// with no access for anyone else.
pub fn meeting_dir(base: &Path, secret: &Secret) -> Result<PathBuf> {
    let dir = meeting_path(base, secret);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) if !base.is_dir() => {
            return Err(Error::invalid(
                "standalone rendezvous",
                format!(
                    "{} is not a directory; set TPCOMM_RUNTIME_DIR (or XDG_RUNTIME_DIR) to a directory every rank can reach",
                    base.display()
                ),
            ))
        }
        Err(e) => return Err(Error::io(format!("create {}", dir.display()), e)),
    }
    let m = std::fs::symlink_metadata(&dir)
        .map_err(|e| Error::io(format!("inspect {}", dir.display()), e))?;
    let refuse = |why: &str| {
        Err(Error::invalid(
            "standalone rendezvous",
            format!(
                "{} {why}; remove it, or set TPCOMM_RUNTIME_DIR (or XDG_RUNTIME_DIR) to a directory only you can write",
                dir.display()
            ),
        ))
    };
    if m.file_type().is_symlink() || !m.is_dir() {
        return refuse("is not a plain directory");
    }
    if m.uid() != euid() {
        return refuse(&format!("belongs to user {}, not to this user", m.uid()));
    }
    if m.mode() & 0o077 != 0 {
        return refuse(&format!(
            "has mode {:o}; other users may enter it",
            m.mode() & 0o777
        ));
    }
    Ok(dir)
}

/// The name of the directory ranks of `secret` meet in under `base` (what
/// [`meeting_dir`] creates).
pub fn meeting_path(base: &Path, secret: &Secret) -> PathBuf {
    base.join(format!("tpcomm-standalone-{:016x}", secret.tag(0)))
}

/// Where meeting directories are made (the meeting directory itself is
/// 0700 wherever it is): the first existing directory of this user's
/// runtime directory ($XDG_RUNTIME_DIR), the temporary directory the user
/// chose ($TMPDIR), /dev/shm, and the system's temporary directory. Every
/// send/recv group and split swaps records there, so memory-backed places
/// come first: on tmpfs an exchange of 2 thread ranks takes about 46 us, on
/// a disk-backed /tmp of the build machine about 1.5 ms (docs/standalone.md).
/// `TPCOMM_RUNTIME_DIR`, when set, is taken as it is: the user named the
/// place, so a missing one is an error of the meeting, not a reason to
/// meet elsewhere (its peers would not look there).
pub fn runtime_base() -> PathBuf {
    base_from(
        crate::settings::get().runtime_dir.clone(),
        std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
        std::env::var_os("TMPDIR").map(PathBuf::from),
        |p| p.is_dir(),
    )
}

/// [`runtime_base`]'s choice from TPCOMM_RUNTIME_DIR (`given`) and the two
/// variables, `is_dir` saying which paths are directories.
fn base_from(
    given: Option<PathBuf>,
    runtime: Option<PathBuf>,
    tmpdir: Option<PathBuf>,
    is_dir: impl Fn(&Path) -> bool,
) -> PathBuf {
    if let Some(g) = given.filter(|g| !g.as_os_str().is_empty()) {
        return g;
    }
    [runtime, tmpdir, Some(PathBuf::from("/dev/shm"))]
        .into_iter()
        .flatten()
        .find(|p| !p.as_os_str().is_empty() && is_dir(p))
        .unwrap_or_else(std::env::temp_dir)
}

/// Swaps `turn.mine` with every rank of the communicator of `secret`
/// meeting in `dir` (from [`meeting_dir`]): the records in rank order, each
/// checked to carry this secret's tag. Bounded by `turn.timeout`, naming a
/// rank that did not post; `turn.key` names the step (each rank uses the
/// same keys in the same order).
pub fn exchange(dir: &Path, secret: &Secret, turn: Turn<'_>) -> Result<Vec<Vec<u8>>> {
    let rec = tagged(secret, turn.mine);
    let (key, rank, world) = (turn.key, turn.rank, turn.world);
    let all = Rendezvous::Dir(dir.to_path_buf()).exchange(key, rank, world, &rec, turn.timeout)?;
    all.into_iter()
        .enumerate()
        .map(|(r, v)| untagged(dir, secret, r, v))
        .collect()
}

/// `mine` behind the secret's record tag.
fn tagged(secret: &Secret, mine: &[u8]) -> Vec<u8> {
    let mut rec = Vec::with_capacity(8 + mine.len());
    rec.extend_from_slice(&secret.tag(1).to_le_bytes());
    rec.extend_from_slice(mine);
    rec
}

/// Rank `r`'s record `v` without the tag; refused by name when it lacks it.
fn untagged(dir: &Path, secret: &Secret, r: usize, v: Vec<u8>) -> Result<Vec<u8>> {
    match v.strip_prefix(&secret.tag(1).to_le_bytes()[..]) {
        Some(body) => Ok(body.to_vec()),
        None => Err(Error::invalid(
            "standalone rendezvous",
            format!(
                "rank {r}'s record in {} was not made with this communicator's unique id (another job meeting at the same place?)",
                dir.display()
            ),
        )),
    }
}

/// Posts `mine` as rank `rank`'s record of step `key` in `dir` (from
/// [`meeting_dir`]), tagged as [`exchange`] tags it, without waiting for
/// anyone (auto_mode.rs's census).
pub fn post(dir: &Path, secret: &Secret, key: &str, rank: usize, mine: &[u8]) -> Result<()> {
    tpcomm::cuda::post_record(dir, key, rank, &tagged(secret, mine))
}

/// [`post`] only if no record of `key` and `rank` is there yet: `false`
/// when one was (exactly one of racing posts wins; see [`read`] for it).
pub fn post_first(
    dir: &Path,
    secret: &Secret,
    key: &str,
    rank: usize,
    mine: &[u8],
) -> Result<bool> {
    tpcomm::cuda::post_first_record(dir, key, rank, &tagged(secret, mine))
}

/// Rank `rank`'s record of step `key` in `dir`, `None` while there is none;
/// refused by name when it was not made with this secret.
pub fn read(dir: &Path, secret: &Secret, key: &str, rank: usize) -> Result<Option<Vec<u8>>> {
    tpcomm::cuda::read_record(dir, key, rank)?
        .map(|v| untagged(dir, secret, rank, v))
        .transpose()
}

/// Removes this rank's records in `dir` except those of step `keep`. Sound
/// once every rank has completed step `keep`: each rank posts a step only
/// after it has read every record of the steps before, so no rank still
/// needs them; `keep`'s own records may still be being read.
pub fn tidy(dir: &Path, rank: usize, keep: &str) {
    let mine = format!(".rank{rank}");
    let kept = format!("{keep}.rank{rank}");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(&mine) && name != kept.as_str() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

thread_local! {
    /// What ncclGetLastError returns after a call standalone mode refused or
    /// failed on this thread (a C string, so its address can be handed out).
    static LAST_ERROR: std::cell::RefCell<std::ffi::CString> =
        std::cell::RefCell::new(std::ffi::CString::default());
}

/// Records `text` as this thread's last error (what ncclGetLastError
/// returns), logs it, and gives `code`.
pub fn fail(code: c_int, text: String) -> c_int {
    crate::settings::warn!("{text}");
    let c = std::ffi::CString::new(text.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with_borrow_mut(|s| *s = c);
    code
}

/// Refuses `call` on a standalone communicator: records the text
/// ncclGetLastError returns on this thread and gives `ncclInvalidUsage`.
pub fn unservable(call: &str, why: &str) -> c_int {
    fail(
        INVALID_USAGE,
        format!(
            "tpcomm standalone mode cannot serve {call}: {why} (no real NCCL communicator is under this one; to use NCCL, give each rank a GPU of its own with TPCOMM_STANDALONE unset or 0)"
        ),
    )
}

/// The text of this thread's last refused or failed call (empty if none).
pub fn last_error() -> String {
    LAST_ERROR.with_borrow(|s| s.to_string_lossy().into_owned())
}

/// The address of this thread's last error text: valid until the next call
/// on this thread records another (NCCL's own ncclGetLastError text lives
/// as long).
pub fn last_error_ptr() -> *const std::ffi::c_char {
    LAST_ERROR.with_borrow(|s| s.as_ptr())
}

/// Whether this thread has a last error recorded.
pub fn has_last_error() -> bool {
    LAST_ERROR.with_borrow(|s| !s.is_empty())
}

/// Forgets this thread's last error: a creation auto mode hands to the real
/// NCCL leaves ncclGetLastError to NCCL's own text again.
pub fn clear_last_error() {
    LAST_ERROR.with_borrow_mut(|s| *s = std::ffi::CString::default());
}

/// A fresh private directory for tests (no tempfile crate in this crate's
/// deps), removed with all it holds when the guard is dropped: when the test
/// ends, also by a failed assertion.
#[cfg(test)]
pub(crate) fn test_dir() -> TestDir {
    let mut r = [0u8; 8];
    random_bytes(&mut r).unwrap();
    let d = std::env::temp_dir().join(format!("tpcomm-sa-test-{:016x}", u64::from_le_bytes(r)));
    std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    TestDir(d)
}

/// A directory a test made, removed on drop (see [`test_dir`]); also what a
/// test holds to remove a directory that the code under test makes.
#[cfg(test)]
pub(crate) struct TestDir(pub(crate) PathBuf);

#[cfg(test)]
impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    /// Rank `rank` of `world`'s turn at the step `key`.
    fn turn<'a>(key: &'a str, rank: usize, world: usize, mine: &'a [u8], t: Duration) -> Turn<'a> {
        Turn {
            key,
            rank,
            world,
            mine,
            timeout: t,
        }
    }

    #[test]
    fn ids_carry_a_fresh_secret_that_only_standalone_ids_have() {
        let a = new_id().unwrap();
        let b = new_id().unwrap();
        let (sa, sb) = (parse(&a).unwrap(), parse(&b).unwrap());
        assert_ne!(sa, sb, "two ids share a secret");
        assert_ne!(sa.tag(0), sb.tag(0));
        assert_ne!(sa.tag(0), sa.tag(1));
        // A real NCCL id (socket address bytes first) is not standalone.
        let mut real = [0u8; 128];
        real[0] = 2;
        real[2] = 0x9a;
        assert!(parse(&real).is_none());
        // Nor is a standalone magic with an all-zero secret.
        let mut zero = [0u8; 128];
        zero[..8].copy_from_slice(MAGIC);
        assert!(parse(&zero).is_none());
        // The Debug form shows a tag, never the secret's bytes.
        let shown = format!("{sa:?}");
        assert!(shown.starts_with("Secret(tag "), "{shown}");
    }

    #[test]
    fn ranks_holding_the_same_id_meet_and_get_every_record_in_rank_order() {
        let base = test_dir();
        let id = new_id().unwrap();
        let world = 4;
        let out: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..world)
                .map(|r| {
                    let (base, id) = (&base, &id);
                    s.spawn(move || {
                        let secret = parse(id).unwrap();
                        let dir = meeting_dir(base, &secret).unwrap();
                        let t = Duration::from_secs(10);
                        exchange(&dir, &secret, turn("init", r, world, &[r as u8; 3], t))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for res in out {
            let all = res.unwrap();
            assert_eq!(
                all,
                (0..world).map(|r| vec![r as u8; 3]).collect::<Vec<_>>()
            );
        }
        let dir = meeting_dir(&base, &parse(&id).unwrap()).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_record_made_without_the_secret_is_refused_and_a_missing_rank_is_named() {
        let base = test_dir();
        let id = new_id().unwrap();
        let secret = parse(&id).unwrap();
        let dir = meeting_dir(&base, &secret).unwrap();
        // Someone who knows the directory but not the secret posts rank 1.
        let impostor = Secret([7u8; 16]);
        let t = Duration::from_secs(5);
        let out = std::thread::scope(|s| {
            let h = s.spawn(|| exchange(&dir, &impostor, turn("init", 1, 2, b"x", t)));
            let mine = exchange(&dir, &secret, turn("init", 0, 2, b"y", t));
            let _ = h.join();
            mine
        });
        let e = out.unwrap_err().to_string();
        assert!(
            e.contains("rank 1's record") && e.contains("unique id"),
            "{e}"
        );
        // Nobody posts rank 1 of a second step: the wait ends naming it.
        let t = Duration::from_millis(300);
        let e = exchange(&dir, &secret, turn("step2", 0, 2, b"y", t))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 1"), "{e}");
    }

    #[test]
    fn records_posted_alone_carry_the_tag_and_the_first_post_wins() {
        let base = test_dir();
        let secret = Secret::random().unwrap();
        let dir = meeting_dir(&base, &secret).unwrap();
        assert_eq!(read(&dir, &secret, "census", 1).unwrap(), None);
        post(&dir, &secret, "census", 1, b"gpu").unwrap();
        assert_eq!(
            read(&dir, &secret, "census", 1).unwrap().as_deref(),
            Some(&b"gpu"[..])
        );
        assert!(post_first(&dir, &secret, "decision", 0, b"a").unwrap());
        assert!(!post_first(&dir, &secret, "decision", 0, b"b").unwrap());
        assert_eq!(
            read(&dir, &secret, "decision", 0).unwrap().as_deref(),
            Some(&b"a"[..])
        );
        // Someone who knows the directory but not the secret.
        post(&dir, &Secret([7u8; 16]), "census", 2, b"gpu").unwrap();
        let e = read(&dir, &secret, "census", 2).unwrap_err().to_string();
        assert!(e.contains("rank 2's record"), "{e}");
        assert_eq!(Secret::from_bytes([0u8; 16]), None);
        assert_eq!(Secret::from_bytes(secret.to_bytes()), Some(secret));
    }

    #[test]
    fn a_meeting_directory_others_may_enter_or_a_link_is_refused() {
        let base = test_dir();
        let secret = parse(&new_id().unwrap()).unwrap();
        let dir = meeting_dir(&base, &secret).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = meeting_dir(&base, &secret).unwrap_err().to_string();
        assert!(e.contains("other users may enter it"), "{e}");
        std::fs::remove_dir(&dir).unwrap();
        let target = base.join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, &dir).unwrap();
        let e = meeting_dir(&base, &secret).unwrap_err().to_string();
        assert!(e.contains("not a plain directory"), "{e}");
    }

    #[test]
    fn an_unservable_call_is_invalid_usage_and_the_last_error_names_it() {
        assert_eq!(unservable("ncclAlltoAll", "all-to-all is not in tpcomm"), 5);
        let t = last_error();
        assert!(
            t.contains("ncclAlltoAll") && t.contains("all-to-all is not in tpcomm"),
            "{t}"
        );
    }

    #[test]
    fn tidying_removes_only_this_rank_s_earlier_records() {
        let base = test_dir();
        let secret = parse(&new_id().unwrap()).unwrap();
        let dir = meeting_dir(&base, &secret).unwrap();
        for f in [
            "a.rank1", "b.rank1", "b.rank11", "c.rank1", "a.rank0", "x.rank21",
        ] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        tidy(&dir, 1, "c");
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["a.rank0", "b.rank11", "c.rank1", "x.rank21"]);
    }

    #[test]
    fn an_id_made_on_another_host_is_refused_at_once() {
        let mut id = new_id().unwrap();
        assert_eq!(check_host(&id), Ok(()));
        id[28] ^= 0x5a;
        let e = check_host(&id).unwrap_err();
        assert!(
            e.contains("another host") && e.contains("TPCOMM_STANDALONE"),
            "{e}"
        );
        // An id without a host tag is not refused for it.
        id[28..36].fill(0);
        assert_eq!(check_host(&id), Ok(()));
    }

    #[test]
    fn the_default_base_is_an_existing_directory() {
        assert!(runtime_base().is_dir());
    }

    #[test]
    fn the_base_is_the_runtime_dir_then_tmpdir_then_dev_shm_then_the_system_temp_dir() {
        let p = |s: &str| Some(PathBuf::from(s));
        let all = |_: &Path| true;
        assert_eq!(
            base_from(None, p("/run/user/7"), p("/scratch"), all),
            PathBuf::from("/run/user/7")
        );
        assert_eq!(
            base_from(None, None, p("/scratch"), all),
            PathBuf::from("/scratch")
        );
        assert_eq!(base_from(None, p(""), None, all), PathBuf::from("/dev/shm"));
        // Paths that are not directories are passed over.
        let only = |d: &'static str| move |x: &Path| x == Path::new(d);
        assert_eq!(
            base_from(None, p("/gone"), p("/scratch"), only("/scratch")),
            PathBuf::from("/scratch")
        );
        assert_eq!(
            base_from(None, p("/gone"), p("/gone2"), only("/dev/shm")),
            PathBuf::from("/dev/shm")
        );
        assert_eq!(
            base_from(None, p("/gone"), None, |_| false),
            std::env::temp_dir()
        );
    }

    #[test]
    fn tpcomm_runtime_dir_is_taken_as_given_even_when_missing() {
        let p = |s: &str| Some(PathBuf::from(s));
        let all = |_: &Path| true;
        assert_eq!(
            base_from(p("/shared/meet"), p("/run/user/7"), p("/scratch"), all),
            PathBuf::from("/shared/meet")
        );
        // Named but missing: kept, so the meeting fails naming it rather
        // than ranks meeting in different places.
        assert_eq!(
            base_from(p("/gone"), p("/run/user/7"), None, |x: &Path| x
                != Path::new("/gone")),
            PathBuf::from("/gone")
        );
        // Empty: as unset.
        assert_eq!(
            base_from(p(""), p("/run/user/7"), None, all),
            PathBuf::from("/run/user/7")
        );
    }

    #[test]
    fn a_missing_base_is_refused_naming_it_and_the_variable() {
        let secret = Secret::from_bytes([7u8; 16]).expect("a secret");
        let e = meeting_dir(Path::new("/nonexistent-tpcomm-base"), &secret)
            .expect_err("no such base")
            .to_string();
        assert!(e.contains("/nonexistent-tpcomm-base"), "{e}");
        assert!(e.contains("TPCOMM_RUNTIME_DIR"), "{e}");
    }
}
