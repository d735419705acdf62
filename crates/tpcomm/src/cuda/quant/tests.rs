//! Unit tests of the quantized all-reduce's layout and wire agreement (its
//! launch shape is `launch_shape`'s, tested there).

use super::*;

#[test]
fn quant_args_match_the_cuda_struct_size() {
    // 27 u64 words and four u32: the size `struct QArgs` has in quant.cu.
    assert_eq!(std::mem::size_of::<QuantArgs>(), 27 * 8 + 16);
}

#[test]
fn the_wait_code_is_the_kernels() {
    let src = include_str!("../kernels/quant.cu");
    assert!(src.contains(&format!("#define Q_WAIT_QUANT {WAIT_QUANT}u")));
    assert!(src.contains(&format!("#define Q_CHUNK {CHUNK_ELEMS}u")));
    assert!(src.contains(&format!("#define Q_BLOCK {QUANT_MAX_BLOCK}")));
}

#[test]
fn slots_hold_the_largest_message_with_the_smallest_group() {
    for world in 2..=MAX_WORLD {
        for max in [1usize, 16, 1000, 1 << 20, (64 << 20) + 6] {
            for t in [Transport::Cuda, Transport::Host] {
                let l = QuantLayout::new(max, world, t);
                assert!(l.max_elems >= max / 2 && l.max_elems.is_multiple_of(CHUNK_ELEMS));
                assert!(l.scales_off >= l.max_elems);
                assert!(l.flags_off >= l.scales_off + 4 * l.max_elems / 32);
                assert!(l.call_off >= l.flags_off + 4 * l.max_elems / CHUNK_ELEMS);
                assert!(l.slot_stride >= l.call_off + 8 && l.call_off.is_multiple_of(8));
                assert!(l.slot_stride.is_multiple_of(256));
                let senders = if t == Transport::Host { 1 } else { world };
                assert_eq!(l.parity_stride, senders * l.slot_stride);
            }
        }
    }
    // 64 MiB of bf16 over P2P at 2 ranks: 32 Mi codes + 4 MiB scales +
    // 32 KiB flags per slot, then the call word in one more 256-byte
    // line; 4 slots.
    let l = QuantLayout::new(64 << 20, 2, Transport::Cuda);
    assert_eq!(l.slot_stride, (32 << 20) + (4 << 20) + (32 << 10) + 256);
    assert_eq!(l.area_bytes(), 4 * l.slot_stride);
}

#[test]
fn only_enabled_wires_and_large_enough_messages_are_quantized() {
    let min = ByteSize::mib(1);
    assert_eq!(wire_for(Wire::Exact, min, 64 << 20), Wire::Exact);
    assert_eq!(wire_for(Wire::int8(), min, (1 << 20) - 1), Wire::Exact);
    assert_eq!(wire_for(Wire::int8(), min, 1 << 20), Wire::int8());
    assert_eq!(wire_for(Wire::fp8(), ByteSize::b(0), 0), Wire::Exact);
}

#[test]
fn ranks_that_resolved_different_wires_fail_together() {
    let group = super::super::ThreadGroup::new(2);
    let hs: Vec<_> = [Wire::int8(), Wire::fp8()]
        .into_iter()
        .enumerate()
        .map(|(r, w)| {
            let group = group.clone();
            std::thread::spawn(move || {
                let cfg = CudaConfig::new(r, 2, r);
                agree_wire(&cfg, &Rendezvous::Threads(group), w, ByteSize::mib(1))
            })
        })
        .collect();
    for h in hs {
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("rank 1") && e.contains("TPCOMM_WIRE"), "{e}");
    }
    let group = super::super::ThreadGroup::new(2);
    let hs: Vec<_> = (0..2)
        .map(|r| {
            let group = group.clone();
            std::thread::spawn(move || {
                let cfg = CudaConfig::new(r, 2, r);
                agree_wire(
                    &cfg,
                    &Rendezvous::Threads(group),
                    Wire::Exact,
                    ByteSize::mib(1),
                )
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap().unwrap();
    }
}

#[test]
fn an_explicit_wire_in_the_config_wins_over_the_environment() {
    let mut cfg = CudaConfig::new(0, 2, 0);
    cfg.wire = Some(Wire::Fp8 { group: 128 });
    cfg.wire_min_bytes = Some(ByteSize::kib(64));
    assert_eq!(
        resolve_wire(&cfg).unwrap(),
        (Wire::Fp8 { group: 128 }, ByteSize::kib(64))
    );
    cfg.wire = Some(Wire::Int8 { group: 48 });
    assert!(resolve_wire(&cfg).is_err());
}

#[test]
fn two_shot_runs_only_when_every_rank_owns_a_chunk() {
    let c = CHUNK_ELEMS;
    assert!(!QuantAlgo::Auto.runs_twoshot(100 * c, 2));
    assert!(QuantAlgo::Auto.runs_twoshot(100 * c, 4));
    assert!(QuantAlgo::TwoShot.runs_twoshot(2 * c, 2));
    assert!(!QuantAlgo::TwoShot.runs_twoshot(2 * c, 3));
    assert!(QuantAlgo::TwoShot.runs_twoshot(2 * c + 1, 3));
    assert!(!QuantAlgo::OneShot.runs_twoshot(100 * c, 8));
}

#[test]
fn the_step_matches_the_kernel_source() {
    let src = include_str!("../kernels/quant.cu");
    assert!(src.contains(&format!("#define Q_STEP {STEP_CHUNKS}\n")));
}

#[test]
fn ranks_with_different_quantized_algorithms_fail_together() {
    let group = super::super::ThreadGroup::new(2);
    let hs: Vec<_> = [QuantAlgo::Auto, QuantAlgo::Gathered]
        .into_iter()
        .enumerate()
        .map(|(r, algo)| {
            let group = group.clone();
            std::thread::spawn(move || {
                let mut cfg = CudaConfig::new(r, 2, r);
                cfg.wire_algo = algo;
                agree_wire(
                    &cfg,
                    &Rendezvous::Threads(group),
                    Wire::int8(),
                    ByteSize::mib(1),
                )
            })
        })
        .collect();
    for h in hs {
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("rank 1") && e.contains("wire_algo"), "{e}");
    }
}

#[test]
fn auto_is_two_shot_above_two_ranks_where_it_fits_and_gathered_never_is() {
    // `Auto` resolves to a kernel (QuantComm::resolve); only an explicit
    // request (or CudaConfig::wire_algo) runs the gathered form.
    for world in 2..=MAX_WORLD {
        for count in [1usize, CHUNK_ELEMS * 16] {
            let twoshot = QuantAlgo::Auto.runs_twoshot(count, world);
            assert_eq!(
                twoshot,
                world > 2 && crate::quant::model::twoshot_fits(count, world)
            );
            assert!(!QuantAlgo::Gathered.runs_twoshot(count, world));
        }
    }
}
