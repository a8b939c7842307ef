//! Numbers as the tables print them: bytes in binary units, per-operation
//! times with the precision they deserve.

/// Bytes as a short human string (KiB, MiB, GiB, TiB).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Formats a per-op number for tables: ns with two decimals below 10.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 10.0 {
        format!("{ns:.2}")
    } else if ns < 1000.0 {
        format!("{ns:.1}")
    } else {
        format!("{ns:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_times_read_as_a_person_writes_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(human_bytes(1536 << 30), "1.5 TiB");
        assert_eq!(fmt_ns(4.256), "4.26");
        assert_eq!(fmt_ns(123.45), "123.5");
        assert_eq!(fmt_ns(98765.4), "98765");
    }
}
