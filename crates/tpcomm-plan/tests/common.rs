// Shared helpers for the planner tests: the catalog files as text, so a test
// can break one field and check the error names it.
#![allow(dead_code)]

use tpcomm_plan::catalog::Catalog;
use tpcomm_plan::PlanError;

pub const MODELS: &str = include_str!("../../../catalog/models.toml");
pub const GPUS: &str = include_str!("../../../catalog/gpus.toml");
pub const MACHINES: &str = include_str!("../../../catalog/machines.toml");
pub const DRAFTS: &str = include_str!("../../../catalog/drafts.toml");

pub fn load(models: &str, gpus: &str, machines: &str, drafts: &str) -> Result<Catalog, PlanError> {
    Catalog::from_texts(
        ("models.toml", models),
        ("gpus.toml", gpus),
        ("machines.toml", machines),
        ("drafts.toml", drafts),
    )
}

/// Replaces exactly one occurrence of `from` (panics if it is not unique, so
/// a test cannot silently stop breaking what it means to break).
pub fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "{from:?} must occur once");
    text.replacen(from, to, 1)
}
