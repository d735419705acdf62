//! The catalog: models, GPUs, machines and speculative drafts, kept as TOML
//! data under `catalog/` at the repository root. The files are compiled into
//! the binary (so `tpcomm plan` works anywhere) and can be replaced by a
//! directory given at run time. Every entry is validated when loaded.

mod parse;
pub(crate) mod types;

pub use types::*;

use crate::error::{PlanError, Result};
use crate::fields::Fields;
use parse::{entries, locate, parse_draft, parse_gpu, parse_machine, parse_model};
use serde::Serialize;
use std::path::Path;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Catalog {
    pub models: Vec<Model>,
    pub gpus: Vec<Gpu>,
    pub machines: Vec<Machine>,
    pub drafts: Vec<Draft>,
}

pub const MODELS_FILE: &str = "models.toml";
pub const GPUS_FILE: &str = "gpus.toml";
pub const MACHINES_FILE: &str = "machines.toml";
pub const DRAFTS_FILE: &str = "drafts.toml";

const BUILTIN: [(&str, &str); 4] = [
    (MODELS_FILE, include_str!("../../../../catalog/models.toml")),
    (GPUS_FILE, include_str!("../../../../catalog/gpus.toml")),
    (
        MACHINES_FILE,
        include_str!("../../../../catalog/machines.toml"),
    ),
    (DRAFTS_FILE, include_str!("../../../../catalog/drafts.toml")),
];

fn names<T>(items: &[T], name: impl Fn(&T) -> &str) -> String {
    items.iter().map(name).collect::<Vec<_>>().join(", ")
}

/// The error of entry `i` of kind `kind` in `file` (name, text) at its
/// field `field`.
fn field_err(
    (file, text): (&str, &str),
    kind: &str,
    i: usize,
    entry: impl Into<String>,
    field: &str,
    problem: String,
) -> PlanError {
    PlanError::Field {
        file: file.into(),
        line: locate(text, kind, i, Some(field)),
        entry: entry.into(),
        field: field.into(),
        problem,
    }
}

/// The entry of `items` named `name` (ASCII case ignored), or an error of
/// an unknown `kind` naming the known ones.
fn by_name<'a, T>(
    kind: &'static str,
    items: &'a [T],
    name: &str,
    name_of: impl Fn(&T) -> &str,
) -> Result<&'a T> {
    items
        .iter()
        .find(|x| name_of(x).eq_ignore_ascii_case(name))
        .ok_or_else(|| PlanError::UnknownName {
            kind,
            name: name.into(),
            known: names(items, name_of),
        })
}

/// Parses every `[[kind]]` entry of one file; a field error gets the line
/// of the field (or of its entry) in that file.
fn parse_all<T>(
    (file, text): (&str, &str),
    kind: &str,
    parse: impl Fn(&Fields) -> Result<T>,
) -> Result<Vec<T>> {
    entries(file, text, kind)?
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Fields::new(file, i, kind, t)
                .and_then(|f| parse(&f))
                .map_err(|e| match e {
                    PlanError::Field {
                        file,
                        line: None,
                        entry,
                        field,
                        problem,
                    } => PlanError::Field {
                        line: locate(text, kind, i, Some(&field)),
                        file,
                        entry,
                        field,
                        problem,
                    },
                    other => other,
                })
        })
        .collect()
}

impl Catalog {
    /// The catalog compiled into this build (catalog/ at build time).
    pub fn builtin() -> Result<Catalog> {
        let [m, g, ma, d] = BUILTIN;
        Catalog::from_texts(
            (&format!("catalog/{}", m.0), m.1),
            (&format!("catalog/{}", g.0), g.1),
            (&format!("catalog/{}", ma.0), ma.1),
            (&format!("catalog/{}", d.0), d.1),
        )
    }

    /// Reads the four catalog files from a directory.
    pub fn from_dir(dir: &Path) -> Result<Catalog> {
        let read = |f: &str| -> Result<(String, String)> {
            let p = dir.join(f);
            let text = std::fs::read_to_string(&p).map_err(|source| PlanError::Io {
                path: p.display().to_string(),
                source,
            })?;
            Ok((p.display().to_string(), text))
        };
        let (m, g, ma, d) = (
            read(MODELS_FILE)?,
            read(GPUS_FILE)?,
            read(MACHINES_FILE)?,
            read(DRAFTS_FILE)?,
        );
        Catalog::from_texts((&m.0, &m.1), (&g.0, &g.1), (&ma.0, &ma.1), (&d.0, &d.1))
    }

    /// Parses and validates the four files; (file name for messages, text).
    pub fn from_texts(
        models: (&str, &str),
        gpus: (&str, &str),
        machines: (&str, &str),
        drafts: (&str, &str),
    ) -> Result<Catalog> {
        let mut cat = Catalog {
            models: parse_all(models, "model", parse_model)?,
            gpus: parse_all(gpus, "gpu", parse_gpu)?,
            machines: parse_all(machines, "machine", parse_machine)?,
            drafts: parse_all(drafts, "draft", parse_draft)?,
        };
        cat.check_references(models, gpus, machines, drafts)?;
        cat.share_class_layer_costs(gpus)?;
        Ok(cat)
    }

    /// Gives every GPU of a class that has no `[gpu.measured]` block the
    /// per-layer cost measured on the one GPU of the class whose block says
    /// `layer_us_for_class = true`. Two such GPUs in one class are refused:
    /// which of them stands for the class would be a guess.
    fn share_class_layer_costs(&mut self, gpus: (&str, &str)) -> Result<()> {
        let mut shared: Vec<ClassLayerCost> = Vec::new();
        for (i, g) in self.gpus.iter().enumerate() {
            let (Some(class), Some(m)) = (&g.class, &g.measured) else {
                continue;
            };
            if !m.layer_us_for_class {
                continue;
            }
            if let Some(first) = shared
                .iter()
                .find(|s| s.class.eq_ignore_ascii_case(&class.name))
            {
                let field = "measured.layer_us_for_class";
                return Err(field_err(gpus, "gpu", i, g.name.clone(), field, format!(
                        "{} already stands for class {:?}; only one measured GPU per class may (the others keep their own measurement)",
                        first.measured_on, class.name
                    )));
            }
            shared.push(ClassLayerCost {
                class: class.name.clone(),
                measured_on: g.name.clone(),
                layer_us: m.layer_us,
                source: m.source.clone(),
            });
        }
        for g in &mut self.gpus {
            if g.measured.is_some() {
                continue;
            }
            if let Some(class) = &g.class {
                g.class_layer = shared
                    .iter()
                    .find(|s| s.class.eq_ignore_ascii_case(&class.name))
                    .cloned();
            }
        }
        Ok(())
    }

    fn check_references(
        &self,
        models: (&str, &str),
        gpus: (&str, &str),
        machines: (&str, &str),
        drafts: (&str, &str),
    ) -> Result<()> {
        for (file, kind, all) in [
            (
                models,
                "model",
                self.models
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>(),
            ),
            (
                gpus,
                "gpu",
                self.gpus.iter().map(|g| g.name.as_str()).collect(),
            ),
            (
                machines,
                "machine",
                self.machines.iter().map(|m| m.name.as_str()).collect(),
            ),
            (
                drafts,
                "draft",
                self.drafts.iter().map(|d| d.name.as_str()).collect(),
            ),
        ] {
            for (i, n) in all.iter().enumerate() {
                if all[..i].iter().any(|m| m.eq_ignore_ascii_case(n)) {
                    return Err(field_err(
                        file,
                        kind,
                        i,
                        n.to_string(),
                        "name",
                        format!("a second {kind} has this name"),
                    ));
                }
            }
        }
        for (i, m) in self.machines.iter().enumerate() {
            if self.gpu(&m.gpu).is_err() {
                return Err(field_err(
                    machines,
                    "machine",
                    i,
                    m.name.clone(),
                    "gpu",
                    format!(
                        "no gpu named {:?} in the catalog; known: {}",
                        m.gpu,
                        names(&self.gpus, |g| &g.name)
                    ),
                ));
            }
        }
        for (i, d) in self.drafts.iter().enumerate() {
            self.model(&d.target).map_err(|_| {
                field_err(
                    drafts,
                    "draft",
                    i,
                    d.name.clone(),
                    "target",
                    format!(
                        "no model named {:?} in the catalog; known: {}",
                        d.target,
                        names(&self.models, |m| &m.name)
                    ),
                )
            })?;
        }
        Ok(())
    }

    pub fn model(&self, name: &str) -> Result<&Model> {
        by_name("model", &self.models, name, |m| &m.name)
    }

    pub fn gpu(&self, name: &str) -> Result<&Gpu> {
        by_name("gpu", &self.gpus, name, |g| &g.name)
    }

    pub fn machine(&self, name: &str) -> Result<&Machine> {
        by_name("machine", &self.machines, name, |m| &m.name)
    }

    pub fn draft(&self, name: &str) -> Result<&Draft> {
        by_name("draft", &self.drafts, name, |d| &d.name)
    }
}
