//! One worker process per rank for the GPU benches: the command re-runs
//! itself with a worker's command line, the workers meet in a fresh
//! directory, and each leaves its result there as `result.rank<r>.json`.

use serde::de::DeserializeOwned;
use std::ffi::OsStr;
use std::path::Path;
use tpcomm::{Error, Result};

/// Starts `world` copies of this executable, rank `r` with `argv(r, dir)`,
/// waits for every one, and returns their results in rank order. `tag` names
/// the meeting directory (under the temporary directory), removed at the end.
pub(crate) fn run_worker_processes<T, A, S>(
    tag: &str,
    world: usize,
    argv: impl Fn(usize, &Path) -> A,
) -> Result<Vec<T>>
where
    T: DeserializeOwned,
    A: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let exe = std::env::current_exe().map_err(|e| Error::io("find this executable", e))?;
    let dir = std::env::temp_dir().join(format!(
        "tpcomm-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    let mut children = Vec::new();
    for r in 0..world {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(argv(r, &dir));
        children.push(
            cmd.spawn()
                .map_err(|e| Error::io("start a worker process", e))?,
        );
    }
    let mut failed = Vec::new();
    for (r, mut c) in children.into_iter().enumerate() {
        let status = c.wait().map_err(|e| Error::io("wait for a worker", e))?;
        if !status.success() {
            failed.push(format!("rank {r}: {status}"));
        }
    }
    if !failed.is_empty() {
        return Err(Error::Aborted(format!(
            "worker processes failed ({}); their messages are above",
            failed.join(", ")
        )));
    }
    let outs = (0..world)
        .map(|r| {
            let p = dir.join(format!("result.rank{r}.json"));
            let text = std::fs::read_to_string(&p)
                .map_err(|e| Error::io(format!("read {}", p.display()), e))?;
            serde_json::from_str(&text).map_err(|e| Error::invalid("worker result", e.to_string()))
        })
        .collect::<Result<Vec<T>>>()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(outs)
}
