//! Which machine a rank is on: the key every rank sends at creation, and the
//! refusal when one of them differs (tpcomm serves the ranks of one host;
//! both the communicator beside NCCL and the standalone one check it).

/// What identifies this machine (host name and boot id): ranks are on one
/// host only when all agree.
pub fn key() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("{}|{}", host.trim(), boot.trim())
}

/// The first rank whose key in `keys` (every rank's, in rank order) is not
/// `mine`, as "rank P is on another machine (KEY)"; `None` when all agree.
/// Every rank sees the same list, so every rank decides alike.
pub fn other_machine(keys: &[Vec<u8>], mine: &[u8]) -> Option<String> {
    let p = keys.iter().position(|k| k != mine)?;
    Some(format!(
        "rank {p} is on another machine ({})",
        String::from_utf8_lossy(&keys[p])
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_names_this_boot_and_is_stable() {
        let k = key();
        assert!(k.contains('|'), "{k}");
        assert_eq!(k, key());
    }

    #[test]
    fn the_first_rank_on_another_machine_is_named() {
        let a = b"a|1".to_vec();
        let b = b"b|2".to_vec();
        assert_eq!(other_machine(&[a.clone(), a.clone()], &a), None);
        let e = other_machine(&[a.clone(), a.clone(), b.clone(), b], &a).expect("refused");
        assert_eq!(e, "rank 2 is on another machine (b|2)");
    }
}
