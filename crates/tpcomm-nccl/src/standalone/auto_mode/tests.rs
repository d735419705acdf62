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
                    let mut route = route_in("test", id, world as c_int, r as c_int, &k.place, gpu);
                    if let Creator::Undecided(u) = route {
                        // Inside a group of this thread's one creation:
                        // decided at its end, which is now.
                        route = decide_group(vec![u]).remove(0);
                    }
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
                        Creator::Undecided(u) => panic!("undecided after the group: {u:?}"),
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

/// One thread creating ranks `order` of `gpus.len()` inside one group
/// (rank `r` on fake GPU `gpus[r]`): every creation call returns at once,
/// undecided, and the group's end decides them all. Gives each rank's
/// creator (by rank; `None` for a rank not in `order`) and how long the
/// calls and the group's end took.
fn one_thread_group(
    id: &[u8; 128],
    gpus: &[u8],
    order: &[usize],
    p: &Place,
) -> (Vec<Option<Creator>>, Duration, Duration) {
    let world = gpus.len() as c_int;
    let t0 = Instant::now();
    let asked: Vec<Undecided> = order
        .iter()
        .map(|&r| {
            let g = gpus[r];
            match route_in("test", id, world, r as c_int, p, || {
                Ok(DeviceIdentity::here([g; 16]))
            }) {
                Creator::Undecided(u) => u,
                other => panic!("rank {r} decided inside the group: {other:?}"),
            }
        })
        .collect();
    let calls = t0.elapsed();
    let t1 = Instant::now();
    let decided = decide_group(asked);
    let end = t1.elapsed();
    let mut by_rank: Vec<Option<Creator>> = (0..gpus.len()).map(|_| None).collect();
    for (&r, c) in order.iter().zip(decided) {
        by_rank[r] = Some(c);
    }
    (by_rank, calls, end)
}

fn group_place(base: &Path, wait_ms: u64) -> Place {
    let mut p = place(base, wait_ms, 20_000);
    p.in_group = true;
    p
}

#[test]
fn one_thread_creating_every_rank_in_a_group_on_one_gpu_is_standalone_at_once() {
    // nccl-tests' default: one thread, ncclGroupStart, ncclCommInitRank
    // for rank 0, 1, ... on one GPU, ncclGroupEnd. No call may wait for
    // a rank the thread creates after it; the group's end decides, well
    // within the 5 s census wait. Rank 0 last as well (NCCL allows any
    // order).
    for (seed, n, order) in [
        (20u8, 2usize, vec![0, 1]),
        (21, 3, vec![0, 1, 2]),
        (22, 4, vec![0, 1, 2, 3]),
        (23, 3, vec![2, 1, 0]),
    ] {
        let base = standalone::test_dir();
        let (_, id) = marked(seed);
        let (creators, calls, end) =
            one_thread_group(&id, &vec![5; n], &order, &group_place(&base, 5_000));
        assert!(
            calls < Duration::from_millis(500),
            "{n} ranks: the calls took {calls:?}"
        );
        assert!(
            end < Duration::from_millis(1_000),
            "{n} ranks: the group's end took {end:?}"
        );
        for (r, c) in creators.iter().flatten().enumerate() {
            assert!(
                matches!(c, Creator::Standalone(s) if *s == secret_of(&id)),
                "{n} ranks, rank {r}: {c:?}"
            );
        }
    }
}

#[test]
fn one_thread_creating_every_rank_in_a_group_on_gpus_of_their_own_is_nccl() {
    // nccl-tests with -g: one thread creates a rank on each GPU inside a
    // group. Every rank is NCCL's, with the id as NCCL made it, decided at
    // the group's end without the census wait, and the census leaves
    // nothing once NCCL has made the communicator.
    for (seed, n) in [(30u8, 2usize), (31, 3), (32, 4)] {
        let base = standalone::test_dir();
        let (nccls, id) = marked(seed);
        let gpus: Vec<u8> = (0..n as u8).collect();
        let order: Vec<usize> = (0..n).collect();
        let (creators, _, end) = one_thread_group(&id, &gpus, &order, &group_place(&base, 5_000));
        assert!(
            end < Duration::from_millis(1_000),
            "{n} ranks: the group's end took {end:?}"
        );
        for (r, c) in creators.into_iter().flatten().enumerate() {
            match c {
                Creator::Nccl { id: got, after } => {
                    assert_eq!(got, nccls, "{n} ranks, rank {r}");
                    after.expect("census records to remove").done(SUCCESS);
                }
                other => panic!("{n} ranks, rank {r}: {other:?}"),
            }
        }
        assert!(!dir_of(&base, &id).exists(), "the meeting directory stayed");
    }
}

#[test]
fn a_group_s_ranks_and_a_rank_outside_it_share_a_gpu_standalone() {
    // This thread creates ranks 1 and 0 (in that order) inside a group;
    // another thread creates rank 2 outside any group, later. All share
    // GPU 0: rank 0's census at the group's end counts all three.
    let base = standalone::test_dir();
    let (_, id) = marked(13);
    let outside = place(&base, 5_000, 20_000);
    let gpu0 = || Ok(DeviceIdentity::here([0; 16]));
    let t0 = Instant::now();
    let (mine, other) = std::thread::scope(|s| {
        let other = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            route_in("test", &id, 3, 2, &outside, gpu0)
        });
        let (mine, _, _) = one_thread_group(&id, &[0, 0, 0], &[1, 0], &group_place(&base, 5_000));
        (mine, other.join().unwrap())
    });
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(mine[2].is_none());
    for (r, c) in mine.iter().flatten().enumerate().chain([(2, &other)]) {
        assert!(
            matches!(c, Creator::Standalone(s) if *s == secret_of(&id)),
            "rank {r}: {c:?}"
        );
    }
}

#[test]
fn an_abandoned_creation_decides_nccl_for_every_rank() {
    // Rank 1 posted inside a group, then could not go on (api/init.rs: a
    // NULL pointer): rank 0 must not count on it for standalone.
    let base = standalone::test_dir();
    let (nccls, id) = marked(15);
    let gpu0 = || Ok(DeviceIdentity::here([0; 16]));
    let Creator::Undecided(u) = route_in("test", &id, 2, 1, &group_place(&base, 5_000), gpu0)
    else {
        panic!("decided inside the group")
    };
    abandon(u, "its communicator pointer is NULL");
    let t0 = Instant::now();
    let r0 = route_in("test", &id, 2, 0, &place(&base, 5_000, 20_000), gpu0);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        matches!(r0, Creator::Nccl { id: got, .. } if got == nccls),
        "{r0:?}"
    );
}

#[test]
fn inside_a_group_a_decision_already_made_is_followed_at_the_call() {
    // Rank 1 (TPCOMM_STANDALONE=0) decides NCCL first; rank 0, created
    // later inside a group, follows it at its call: nothing left to decide.
    let base = standalone::test_dir();
    let (nccls, id) = marked(14);
    let mut off = place(&base, 5_000, 20_000);
    off.mode = Standalone::Never;
    let r1 = route_in("test", &id, 2, 1, &off, || panic!("no GPU asked for"));
    assert!(
        matches!(r1, Creator::Nccl { id: got, .. } if got == nccls),
        "{r1:?}"
    );
    let r0 = route_in("test", &id, 2, 0, &group_place(&base, 5_000), || {
        Ok(DeviceIdentity::here([0; 16]))
    });
    assert!(
        matches!(r0, Creator::Nccl { id: got, .. } if got == nccls),
        "{r0:?}"
    );
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
