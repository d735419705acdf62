//! The table both devices print: nccl-tests' columns plus the mode (eager or
//! graph), so a CPU run and a GPU run read side by side.

use tpcomm::report::BenchRow;

/// The two header lines.
pub(crate) fn header() -> String {
    format!(
        "{:>12} {:>12} {:>6} {:>6} {:>16} {:>6} {:>10} {:>10} {:>10} {:>7}\n{:>12} {:>12} {:>6} {:>6} {:>16} {:>6} {:>10} {:>10} {:>10} {:>7}",
        "size(B)", "count", "type", "redop", "algo", "mode", "time(us)", "algbw", "busbw", "#wrong",
        "", "(elements)", "", "", "", "", "median", "(GB/s)", "(GB/s)", ""
    )
}

pub(crate) fn line(r: &BenchRow) -> String {
    format!(
        "{:>12} {:>12} {:>6} {:>6} {:>16} {:>6} {:>10.2} {:>10.2} {:>10.2} {:>7}",
        r.bytes,
        r.count,
        r.dtype.name(),
        r.op,
        r.algo,
        r.mode,
        r.time_us,
        r.algbw_gbps,
        r.busbw_gbps,
        r.wrong
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpcomm::report::RowLabels;
    use tpcomm::DType;

    #[test]
    fn rows_line_up_under_the_header() {
        // The longest labels the benches print (a collective's name, a
        // quantized wire with its algorithm) line up as the short ones do.
        for algo in ["nccl", "reduce-scatter", "host-delta", "int8-two-shot"] {
            let r = BenchRow::new(
                1024,
                256,
                DType::Bf16,
                RowLabels {
                    op: "sum",
                    algo,
                    mode: "graph",
                },
                7.5,
                2,
                0,
            );
            let l = line(&r);
            let h = header();
            let first = h.lines().next().unwrap();
            assert_eq!(l.len(), first.len(), "{first}\n{l}");
            for (col, val) in ["type", "redop", "algo", "mode"]
                .iter()
                .zip(["bf16", "sum", algo, "graph"])
            {
                let end = first.find(col).unwrap() + col.len();
                assert_eq!(&l[end - val.len()..end], val, "{first}\n{l}");
            }
        }
    }
}
