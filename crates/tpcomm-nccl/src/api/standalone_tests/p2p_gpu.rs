//! The ignored GPU test of ncclSend/ncclRecv on standalone communicators:
//! ranks as threads sharing GPU 0, then one thread issuing every rank's
//! calls inside one group; every received byte compared with its sender's.

use super::*;
use crate::api::p2p::{ncclRecv, ncclSend};
use tpcomm::cuda::cudarc::driver::{CudaSlice, CudaStream as Stream, DevicePtr};

/// Random bytes (an LCG), different for every (rank, salt).
fn noise(rank: usize, salt: u64, n: usize) -> Vec<u8> {
    let mut x = (salt ^ ((rank as u64) << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect()
}

/// A leg of a pattern: send `send_n` bytes to `to`, receive `recv_n` from
/// `from` (the conformance suite's sendrecv patterns, in bytes).
struct Leg {
    to: usize,
    send_n: usize,
    from: usize,
    recv_n: usize,
}

/// Rank `me`'s legs of pattern `k`: self-send, ring shift, uneven ring, an
/// all-to-all of grouped calls, and a ring past the staging buffer (`big`).
fn legs(k: usize, me: usize, w: usize, big: usize) -> Vec<Leg> {
    let (next, prev) = ((me + 1) % w, (me + w - 1) % w);
    match k {
        0 => vec![Leg {
            to: me,
            send_n: 4100,
            from: me,
            recv_n: 4100,
        }],
        1 => vec![Leg {
            to: next,
            send_n: 4100,
            from: prev,
            recv_n: 4100,
        }],
        2 => vec![Leg {
            to: next,
            send_n: (me + 1) * 37,
            from: prev,
            recv_n: (prev + 1) * 37,
        }],
        3 => (0..w)
            .map(|q| Leg {
                to: q,
                send_n: 1025,
                from: q,
                recv_n: 1025,
            })
            .collect(),
        _ => vec![Leg {
            to: next,
            send_n: big,
            from: prev,
            recv_n: big,
        }],
    }
}

/// Device and pinned buffers of one rank, and its stream.
struct Bufs {
    stream: std::sync::Arc<Stream>,
    a: CudaSlice<u8>,
    b: CudaSlice<u8>,
    host: tpcomm::cuda::cudarc::driver::PinnedHostSlice<u8>,
}

impl Bufs {
    fn new(ctx: &std::sync::Arc<tpcomm::cuda::cudarc::driver::CudaContext>, arena: usize) -> Bufs {
        let stream = ctx.new_stream().unwrap();
        let a = stream.alloc_zeros::<u8>(arena).unwrap();
        let b = stream.alloc_zeros::<u8>(arena).unwrap();
        // SAFETY: (test) every read of it follows the copy that fills it.
        let host = unsafe { ctx.alloc_pinned_with_flags::<u8>(arena, 0) }.unwrap();
        Bufs { stream, a, b, host }
    }
    fn ptrs(&self) -> (u64, u64) {
        (
            self.a.device_ptr(&self.stream).0,
            self.b.device_ptr(&self.stream).0,
        )
    }
    fn upload(&mut self, v: &[u8]) {
        let h = &mut self.host.as_mut_slice().unwrap()[..v.len()];
        h.copy_from_slice(v);
        self.stream
            .memcpy_htod(&*h, &mut self.a.slice_mut(..v.len()))
            .unwrap();
        self.stream.synchronize().unwrap();
    }
    fn fetch(&mut self, len: usize) -> Vec<u8> {
        let h = &mut self.host.as_mut_slice().unwrap()[..len];
        self.stream.memcpy_dtoh(&self.b.slice(..len), h).unwrap();
        self.stream.synchronize().unwrap();
        h.to_vec()
    }
}

/// Issues rank `me`'s calls of pattern `k` (its sends from `a`, receives
/// into `b`, back to back) and gives the bytes its receives should hold.
fn issue(bufs: &mut Bufs, comm: NcclComm, k: usize, me: usize, w: usize, big: usize) -> Vec<u8> {
    let ls = legs(k, me, w, big);
    let mine: Vec<u8> = ls
        .iter()
        .enumerate()
        .flat_map(|(i, l)| noise(me, (k * 64 + i) as u64, l.send_n))
        .collect();
    bufs.upload(&mine);
    let (pa, pb) = bufs.ptrs();
    let st = bufs.stream.cu_stream() as CudaStream;
    let (mut so, mut ro) = (0u64, 0u64);
    for l in &ls {
        // SAFETY: (test) every range is inside this rank's arenas, which
        // outlive the synchronisation in `fetch`.
        unsafe {
            let r = ncclSend(
                (pa + so) as *const c_void,
                l.send_n,
                1,
                l.to as c_int,
                comm,
                st,
            );
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
            let r = ncclRecv(
                (pb + ro) as *mut c_void,
                l.recv_n,
                1,
                l.from as c_int,
                comm,
                st,
            );
            assert_eq!(r, SUCCESS, "{}", standalone::last_error());
        }
        so += l.send_n as u64;
        ro += l.recv_n as u64;
    }
    // What each receive gets: the sender's leg to this rank.
    ls.iter()
        .flat_map(|l| {
            let theirs = legs(k, l.from, w, big);
            let at: usize = theirs.iter().take_while(|t| t.to != me).count();
            noise(l.from, (k * 64 + at) as u64, l.recv_n)
        })
        .collect()
}

#[test]
#[ignore = "needs a GPU: cargo test --release -p tpcomm-nccl --lib standalone_send_recv -- --ignored"]
fn standalone_send_recv_patterns_match_the_host_on_one_gpu() {
    tpcomm::cuda::share::widen_queues_for_threads();
    let mb = crate::settings::get().max_bytes.bytes() as usize;
    for w in [1usize, 2, 3, 4] {
        let big = mb / w + 5;
        let arena = 4 * mb + 4096;
        // Ranks as threads, each issuing its own calls inside a group.
        let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
        std::thread::scope(|s| {
            for me in 0..w {
                s.spawn(move || {
                    let ctx = tpcomm::cuda::open_context(0).unwrap();
                    ctx.bind_to_thread().unwrap();
                    // SAFETY: (test) no buffer is shared between streams.
                    unsafe { ctx.disable_event_tracking() };
                    let mut bufs = Bufs::new(&ctx, arena);
                    let mut comm: NcclComm = std::ptr::null_mut();
                    let r = create(
                        "test",
                        &mut comm,
                        w as c_int,
                        secret,
                        me as c_int,
                        Blocking::Yes,
                    );
                    assert_eq!(r, SUCCESS, "{}", standalone::last_error());
                    for k in 0..5 {
                        crate::group::enter();
                        let want = issue(&mut bufs, comm, k, me, w, big);
                        crate::group::leave();
                        let r = crate::standalone::p2p::finish();
                        assert_eq!(r, SUCCESS, "pattern {k}: {}", standalone::last_error());
                        let got = bufs.fetch(want.len());
                        let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
                        assert_eq!(
                            wrong,
                            0,
                            "rank {me}/{w} pattern {k}: {wrong} of {} bytes wrong",
                            want.len()
                        );
                    }
                    // SAFETY: (test) a live handle, released once.
                    unsafe { assert_eq!(crate::api::init::ncclCommDestroy(comm), SUCCESS) };
                });
            }
        });
        // One thread: every rank made inside one group, then every rank's
        // calls of each pattern inside one group.
        let ctx = tpcomm::cuda::open_context(0).unwrap();
        ctx.bind_to_thread().unwrap();
        // SAFETY: (test) no buffer is shared between streams.
        unsafe { ctx.disable_event_tracking() };
        let secret = standalone::parse(&standalone::new_id().unwrap()).unwrap();
        let mut comms: Vec<NcclComm> = vec![std::ptr::null_mut(); w];
        crate::group::enter();
        for (me, c) in comms.iter_mut().enumerate() {
            assert_eq!(
                create("test", c, w as c_int, secret, me as c_int, Blocking::Yes),
                SUCCESS
            );
        }
        crate::group::leave();
        assert_eq!(
            crate::standalone::create::finish_group(),
            SUCCESS,
            "{}",
            standalone::last_error()
        );
        let mut bufs: Vec<Bufs> = (0..w).map(|_| Bufs::new(&ctx, arena)).collect();
        for k in 0..5 {
            crate::group::enter();
            let wants: Vec<Vec<u8>> = (0..w)
                .map(|me| issue(&mut bufs[me], comms[me], k, me, w, big))
                .collect();
            crate::group::leave();
            let r = crate::standalone::p2p::finish();
            assert_eq!(
                r,
                SUCCESS,
                "one thread, pattern {k}: {}",
                standalone::last_error()
            );
            for (me, want) in wants.iter().enumerate() {
                let got = bufs[me].fetch(want.len());
                assert!(&got == want, "one thread: rank {me}/{w} pattern {k} wrong");
            }
        }
        for c in comms {
            // SAFETY: (test) live handles, released once.
            unsafe { assert_eq!(crate::api::init::ncclCommDestroy(c), SUCCESS) };
        }
        eprintln!("standalone send/recv test: {w} rank(s) on GPU 0 passed");
    }
}
