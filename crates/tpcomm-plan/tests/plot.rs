//! Plots are written as real PNG files.

use tpcomm_plan::arch::{KvType, QuantScope, WeightType};
use tpcomm_plan::catalog::Catalog;
use tpcomm_plan::latency::LatencySource;
use tpcomm_plan::spec::{Overhead, Planner, SpecInput};

#[test]
fn draws_latency_and_cycle_pngs() {
    let c = Catalog::builtin().unwrap();
    let m = c.machine("h200x2-nvlink").unwrap();
    let p = Planner::new(SpecInput {
        model: c.model("llama-3.1-70b").unwrap(),
        draft: c.draft("llama-3.3-70b-eagle3").unwrap(),
        gpu: c.gpu(&m.gpu).unwrap(),
        tp: 2,
        weights: WeightType::Fp8,
        scope: QuantScope::Linear,
        draft_weights: WeightType::Bf16,
        kv: KvType::Bf16,
        context: 2048,
        spec_latency: LatencySource::Table {
            table: m.tables[0].clone(),
            interp: Default::default(),
        },
        plain_latency: None,
        overhead: Overhead::PerLayerUs { us: 20.0 },
        max_steps: 4,
        // A tree among the chains: the plot draws it too.
        trees: vec![tpcomm_plan::catalog::Tree {
            steps: 3,
            topk: 2,
            draft_tokens: 6,
            accept_length: 3.0,
            source: "test".into(),
        }],
    })
    .unwrap();
    let plan = p.plan().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = tpcomm_plan::plot::draw(dir.path(), &p, &plan).unwrap();
    assert_eq!(files.len(), 2);
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", f.display());
        // Width and height from the IHDR chunk.
        let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!((w, h), (1000, 640));
        assert!(
            bytes.len() > 10_000,
            "{} is suspiciously small",
            f.display()
        );
    }
}
