//! auto_mode.rs's tests: ranks as threads meeting in a private directory of
//! their own, with fake GPU identities and a fake real NCCL that records
//! the id each rank hands it.

use super::census::{decision, judge, uuid_text};
use super::creator::DECISION;
use super::*;
use crate::types::*;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// An id as NCCL makes one: a bootstrap handle in its first 40 bytes,
/// zeros after.
fn nccl_id(seed: u8) -> [u8; 128] {
    let mut id = [0u8; 128];
    for (i, b) in id[..40].iter_mut().enumerate() {
        *b = seed.wrapping_mul(31).wrapping_add(i as u8) | 1;
    }
    id
}

/// NCCL's id and the same id marked (by this host).
fn marked(seed: u8) -> ([u8; 128], [u8; 128]) {
    let id = nccl_id(seed);
    let mut m = id;
    mark(&mut m).unwrap().expect("a zero tail is marked");
    (id, m)
}

fn secret_of(id: &[u8; 128]) -> Secret {
    read_mark(id).unwrap().secret
}

/// Where the ranks of `id` meet under `base` (not created here).
fn dir_of(base: &Path, id: &[u8; 128]) -> PathBuf {
    standalone::meeting_path(base, &secret_of(id))
}

fn place(base: &Path, wait_ms: u64, timeout_ms: u64) -> Place {
    Place {
        mode: Standalone::Auto,
        base: base.to_path_buf(),
        host: standalone::host_hash(),
        wait: Duration::from_millis(wait_ms),
        timeout: Duration::from_millis(timeout_ms),
        in_group: false,
    }
}

/// What a rank ended with.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The id the fake NCCL got.
    Nccl([u8; 128]),
    Standalone(Secret),
    Failed(NcclResult),
}

/// The fake real NCCL: a creation returns once every one of `world` ranks
/// has called it (NCCL's bootstrap), and fails after 10 s otherwise.
struct FakeNccl {
    ids: Mutex<Vec<[u8; 128]>>,
    changed: Condvar,
    world: usize,
}

impl FakeNccl {
    fn init(&self, id: [u8; 128]) -> NcclResult {
        let mut ids = self.ids.lock().unwrap();
        ids.push(id);
        self.changed.notify_all();
        let (ids, t) = self
            .changed
            .wait_timeout_while(ids, Duration::from_secs(10), |v| v.len() < self.world)
            .unwrap();
        drop(ids);
        if t.timed_out() {
            SYSTEM_ERROR
        } else {
            SUCCESS
        }
    }
}

/// One rank: its surroundings, its GPU (`None`: it cannot name one) and
/// when it reaches creation.
struct Rank {
    place: Place,
    gpu: Option<u8>,
    after_ms: u64,
}

/// Runs the ranks as threads through `route_in` and, for those routed to
/// NCCL, the fake NCCL and the tidying after it; gives each rank's end and
/// how long its routing took, and the ids NCCL got.
fn run(id: &[u8; 128], ranks: Vec<Rank>) -> (Vec<(End, Duration)>, Vec<[u8; 128]>) {
    let world = ranks.len();
    let fake = FakeNccl {
        ids: Mutex::new(Vec::new()),
        changed: Condvar::new(),
        world,
    };
    let ends = std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .into_iter()
            .enumerate()
            .map(|(r, k)| {
                let fake = &fake;
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(k.after_ms));
                    let t0 = Instant::now();
                    let gpu = || match k.gpu {
                        Some(g) => Ok(DeviceIdentity::here([g; 16])),
                        None => Err(tpcomm::Error::Unsupported("no GPU in this test".into())),
                    };
                    let route = route_in("test", id, world as c_int, r as c_int, &k.place, gpu);
                    let took = t0.elapsed();
                    let end = match route {
                        Creator::Nccl { id, after } => {
                            let r = fake.init(id);
                            if let Some(t) = after {
                                t.done(r);
                            }
                            End::Nccl(id)
                        }
                        Creator::Standalone(s) => End::Standalone(s),
                        Creator::Failed(r) => End::Failed(r),
                    };
                    (end, took)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids = fake.ids.into_inner().unwrap();
    (ends, ids)
}

fn ranks(base: &Path, gpus: &[u8], after_ms: &[u64], wait_ms: u64) -> Vec<Rank> {
    gpus.iter()
        .zip(after_ms)
        .map(|(&g, &a)| Rank {
            place: place(base, wait_ms, 20_000),
            gpu: Some(g),
            after_ms: a,
        })
        .collect()
}

#[test]
fn a_mark_round_trips_and_an_id_whose_tail_is_not_zero_is_left_alone() {
    let id = nccl_id(7);
    let mut m = id;
    let got = mark(&mut m).unwrap().expect("a zero tail is marked");
    assert_eq!(m[..64], id[..64], "NCCL's bytes changed");
    assert_eq!(&m[64..72], MAGIC);
    assert_eq!(read_mark(&m), Some(got));
    assert_eq!(got.host, standalone::host_hash());
    assert_eq!(stripped(&m), id);
    assert!(standalone::parse(&m).is_none(), "taken for a standalone id");
    let mut again = id;
    let other = mark(&mut again).unwrap().unwrap();
    assert_ne!(got.secret, other.secret, "two ids share a secret");
    // Data in the tail: the id is left as it is and carries no mark.
    let mut busy = id;
    busy[100] = 1;
    let before = busy;
    assert_eq!(mark(&mut busy).unwrap(), None);
    assert_eq!(busy, before);
    assert_eq!(read_mark(&busy), None);
    // The magic alone is no mark: data after it, a zero secret or host.
    for (at, len) in [(120, 1), (72, 16), (88, 8)] {
        let mut bad = m;
        if len == 1 {
            bad[at] = 9;
        } else {
            bad[at..at + len].fill(0);
        }
        assert_eq!(read_mark(&bad), None, "bytes {at}..{}", at + len);
    }
    // An unmarked id goes to NCCL untouched, with no census.
    let base = standalone::test_dir();
    let r = route_in("test", &id, 2, 0, &place(&base, 10, 10), || {
        panic!("no census for an unmarked id")
    });
    assert!(
        matches!(r, Creator::Nccl { id: got, after: None } if got == id),
        "{r:?}"
    );
}

#[test]
fn ranks_sharing_a_gpu_are_all_served_standalone() {
    let base = standalone::test_dir();
    let (_, id) = marked(1);
    // Ranks 0 and 1 share GPU 0; rank 2 has GPU 1; they come apart.
    let (ends, ids) = run(&id, ranks(&base, &[0, 0, 1], &[0, 40, 80], 5_000));
    for (r, (end, _)) in ends.iter().enumerate() {
        assert_eq!(*end, End::Standalone(secret_of(&id)), "rank {r}");
    }
    assert!(ids.is_empty(), "NCCL was called: {ids:?}");
}

#[test]
fn ranks_on_gpus_of_their_own_all_go_to_nccl_with_the_tail_zero_again() {
    let base = standalone::test_dir();
    let (nccls, id) = marked(2);
    let (ends, ids) = run(&id, ranks(&base, &[0, 1, 2, 3], &[30, 0, 60, 10], 5_000));
    for (r, (end, took)) in ends.iter().enumerate() {
        assert_eq!(*end, End::Nccl(nccls), "rank {r}");
        assert!(*took < Duration::from_secs(4), "rank {r} waited {took:?}");
    }
    // The fake NCCL got the id byte for byte as NCCL made it.
    assert_eq!(ids.len(), 4);
    for got in &ids {
        assert_eq!(got[..], nccls[..]);
        assert!(got[64..].iter().all(|&b| b == 0));
    }
    // Once NCCL made the communicator, the census left nothing behind.
    assert!(!dir_of(&base, &id).exists(), "the meeting directory stayed");
}

#[test]
fn the_others_wait_past_the_census_wait_for_a_late_rank_0() {
    let base = standalone::test_dir();
    let (_, id) = marked(10);
    // Rank 0 comes 0.6 s after the others, three times its census wait:
    // they wait for its decision (the full timeout), never deciding early.
    let (ends, ids) = run(&id, ranks(&base, &[3, 3, 4], &[600, 0, 0], 200));
    for (r, (end, _)) in ends.iter().enumerate() {
        assert_eq!(*end, End::Standalone(secret_of(&id)), "rank {r}");
    }
    assert!(ends[1].1 >= Duration::from_millis(550), "{:?}", ends[1].1);
    assert!(ids.is_empty());
}

#[test]
fn a_rank_later_than_rank_0_s_census_makes_every_rank_nccl() {
    let base = standalone::test_dir();
    let (nccls, id) = marked(3);
    // All three share GPU 0, but rank 2 comes 2 s after a 0.2 s census.
    // Rank 0 decides without it: well before rank 2 comes (the margin is
    // for a loaded 2-core machine).
    let (ends, ids) = run(&id, ranks(&base, &[0, 0, 0], &[0, 0, 2000], 200));
    for (r, (end, _)) in ends.iter().enumerate() {
        assert_eq!(*end, End::Nccl(nccls), "rank {r}");
    }
    assert!(ends[0].1 < Duration::from_millis(1700), "{:?}", ends[0].1);
    assert_eq!(ids.len(), 3);
}

#[test]
fn an_id_from_another_host_goes_to_nccl_at_once_with_no_census() {
    let base = standalone::test_dir();
    let (nccls, mut id) = marked(4);
    let elsewhere = (standalone::host_hash() ^ 0x5a5a).max(1);
    id[88..96].copy_from_slice(&elsewhere.to_le_bytes());
    let t0 = Instant::now();
    let r = route_in("test", &id, 2, 1, &place(&base, 5_000, 20_000), || {
        panic!("a census for another host's id")
    });
    assert!(t0.elapsed() < Duration::from_millis(500));
    assert!(
        matches!(r, Creator::Nccl { id: got, after: None } if got == nccls),
        "{r:?}"
    );
    let made: Vec<_> = std::fs::read_dir(&base).unwrap().collect();
    assert!(made.is_empty(), "a meeting directory was made: {made:?}");
}

#[test]
fn with_standalone_off_a_rank_takes_no_census_and_its_group_is_nccl() {
    let base = standalone::test_dir();
    let (nccls, id) = marked(5);
    let mut off = place(&base, 10_000, 20_000);
    off.mode = Standalone::Never;
    // StandaloneComm first: no GPU asked for, no census record, NCCL at once.
    let t0 = Instant::now();
    let r = route_in("test", &id, 2, 1, &off, || {
        panic!("a census with TPCOMM_STANDALONE=0")
    });
    assert!(t0.elapsed() < Duration::from_millis(500));
    let Creator::Nccl { id: got, after } = r else {
        panic!("{r:?}")
    };
    assert_eq!(got, nccls);
    let dir = dir_of(&base, &id);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(CENSUS)),
        "census record posted: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with(DECISION)),
        "no decision: {names:?}"
    );
    // Rank 0, in auto mode, follows that decision at once instead of
    // waiting out its 10 s census.
    let t0 = Instant::now();
    let r = route_in("test", &id, 2, 0, &place(&base, 10_000, 20_000), || {
        Ok(DeviceIdentity::here([0; 16]))
    });
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        matches!(&r, Creator::Nccl { id: got, .. } if *got == nccls),
        "{r:?}"
    );
    drop(after);
}

#[test]
fn a_rank_without_a_gpu_makes_every_rank_nccl_at_once() {
    let base = standalone::test_dir();
    let (nccls, id) = marked(6);
    // Every rank on GPU 0, but rank 1 cannot name its GPU.
    let mut rs = ranks(&base, &[0, 0, 0], &[0, 0, 0], 10_000);
    rs[1].gpu = None;
    let (ends, ids) = run(&id, rs);
    for (r, (end, took)) in ends.iter().enumerate() {
        assert_eq!(*end, End::Nccl(nccls), "rank {r}");
        assert!(*took < Duration::from_secs(5), "rank {r} {took:?}");
    }
    assert_eq!(ids.len(), 3);
}

#[test]
fn ranks_each_creating_inside_a_group_still_share_a_gpu_standalone() {
    // Older PyTorch creates its communicator between ncclGroupStart and
    // ncclGroupEnd, one rank per process: the census works there too.
    let base = standalone::test_dir();
    let (_, id) = marked(12);
    let mut rs = ranks(&base, &[2, 2], &[0, 50], 5_000);
    for r in &mut rs {
        r.place.in_group = true;
    }
    let (ends, ids) = run(&id, rs);
    for (r, (end, _)) in ends.iter().enumerate() {
        assert_eq!(*end, End::Standalone(secret_of(&id)), "rank {r}");
    }
    assert!(ids.is_empty());
}

#[test]
fn one_thread_creating_several_ranks_in_a_group_waits_one_census_at_most() {
    // NCCL's several-devices-per-thread pattern: this thread creates ranks
    // 1 and 0 (in that order) inside a group, another thread rank 2; all
    // share GPU 0. Rank 1 cannot wait for rank 0 (this thread makes it
    // next), so every rank ends in NCCL within about one census wait.
    let base = standalone::test_dir();
    let (nccls, id) = marked(13);
    let mut p = place(&base, 300, 20_000);
    p.in_group = true;
    let gpu0 = || Ok(DeviceIdentity::here([0; 16]));
    let t0 = Instant::now();
    let (mine, other) = std::thread::scope(|s| {
        let other = s.spawn(|| route_in("test", &id, 3, 2, &place(&base, 300, 20_000), gpu0));
        let one = route_in("test", &id, 3, 1, &p, gpu0);
        let zero = route_in("test", &id, 3, 0, &p, gpu0);
        ((one, zero), other.join().unwrap())
    });
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    for (r, route) in [(1, mine.0), (0, mine.1), (2, other)] {
        match route {
            Creator::Nccl { id: got, after } => {
                assert_eq!(got, nccls, "rank {r}");
                // Every rank's records are there to remove once NCCL has
                // made the communicator (inside the group: at its end,
                // api/init.rs), so each route carries them.
                assert!(after.is_some(), "rank {r}");
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
}

#[test]
fn a_rank_that_waits_out_the_timeout_decides_nccl_and_rank_0_follows_it() {
    let base = standalone::test_dir();
    let (nccls, id) = marked(7);
    // Rank 1 waits at most 0.3 s for a decision; rank 0, sharing its GPU,
    // comes after 1 s: had it decided, it would have been standalone.
    let mut rs = ranks(&base, &[0, 0], &[1_000, 0], 10_000);
    rs[1].place.timeout = Duration::from_millis(300);
    let (ends, ids) = run(&id, rs);
    assert_eq!(ends[1].0, End::Nccl(nccls));
    assert!(ends[1].1 >= Duration::from_millis(300), "{:?}", ends[1].1);
    assert_eq!(ends[0].0, End::Nccl(nccls), "rank 0 did not follow");
    assert!(ends[0].1 < Duration::from_secs(2), "{:?}", ends[0].1);
    assert_eq!(ids.len(), 2);
}

#[test]
fn a_decision_not_made_with_the_id_is_refused_by_every_rank() {
    let base = standalone::test_dir();
    let (_, id) = marked(8);
    // Someone who knows the directory's name, not the secret, decides.
    let dir = standalone::meeting_dir(&base, &secret_of(&id)).unwrap();
    let (_, other) = marked(9);
    standalone::post(&dir, &secret_of(&other), DECISION, 0, &decision(true, "x")).unwrap();
    let (ends, ids) = run(&id, ranks(&base, &[0, 0], &[0, 0], 10_000));
    for (r, (end, _)) in ends.iter().enumerate() {
        assert_eq!(*end, End::Failed(SYSTEM_ERROR), "rank {r}");
    }
    assert!(ids.is_empty());
}

#[test]
fn the_judge_needs_every_rank_and_a_shared_gpu() {
    let g = |u: u8| Some(DeviceIdentity::here([u; 16]));
    let w = Duration::from_secs(5);
    let (yes, why) = judge(&[g(1), g(2), g(1)], None, w);
    assert!(
        yes && why.contains("ranks [0, 2] share GPU GPU-0101"),
        "{why}"
    );
    let (yes, why) = judge(&[g(1), g(2)], None, w);
    assert!(!yes && why.contains("own"), "{why}");
    let (yes, why) = judge(&[g(1), None, g(1)], None, w);
    assert!(!yes && why.contains("[1]"), "{why}");
    let (yes, _) = judge(&[g(1), g(1)], Some("bad".into()), w);
    assert!(!yes);
    assert_eq!(
        uuid_text(&[0xab; 16]),
        "GPU-abababab-abab-abab-abab-abababababab"
    );
}
