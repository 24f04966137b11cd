//! The sender's copy on its own: what `RdmaSink::send` does to each message before the NIC
//! (or the kernel) sees it, one `--size`-byte memcpy from the caller's buffer into the next of
//! `--slots` staging slots, on one core, for `--seconds`. Prints the rate, the time per
//! message, and the wire's time for the same bytes at 100, 200 and 400 Gb/s: where the copy is
//! the smaller, `send` keeps up; where it is not, `send_in_place` (no copy) is what reaches line
//! rate. scripts/bench-compare.sh runs it beside `bench --in-place`.
//!
//! `cargo run --release --example copy_cost -- --size 65536 --slots 64 --seconds 2`

use std::hint::black_box;
use std::time::{Duration, Instant};

fn arg(flag: &str, default: u64) -> Result<u64, String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == flag {
            let v = args.next().ok_or(format!("{flag} needs a value"))?;
            return v.parse().map_err(|e| format!("{flag} {v}: {e}"));
        }
    }
    Ok(default)
}

fn main() -> std::process::ExitCode {
    let parsed = (|| {
        Ok::<_, String>((
            arg("--size", 65536)?,
            arg("--slots", 64)?,
            arg("--seconds", 2)?,
        ))
    })();
    let (size, slots, seconds) = match parsed {
        Ok((size, slots, seconds)) if size > 0 && slots > 0 && size * slots <= 1 << 32 => {
            (size as usize, slots as usize, seconds)
        }
        Ok(_) => {
            eprintln!(
                "copy_cost: --size and --slots must be positive, their product at most 4 GiB"
            );
            return std::process::ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("copy_cost: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let source = vec![0x5au8; size];
    let mut staging = vec![0u8; size * slots];
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut copies = 0u64;
    while Instant::now() < until {
        // a block of copies per clock read
        for _ in 0..64 {
            let at = (copies as usize % slots) * size;
            staging[at..at + size].copy_from_slice(black_box(&source));
            black_box(&mut staging);
            copies += 1;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let bytes_per_sec = (copies as f64 * size as f64) / secs;
    let ns_per_copy = secs * 1e9 / copies as f64;
    let wire_ns = |gbits: f64| size as f64 * 8.0 / gbits;
    println!(
        "COPY-COST size={size} slots={slots} rate={:.2}GB/s ({:.0}Gb/s) per_message={:.0}ns wire_ns@100G={:.0} @200G={:.0} @400G={:.0}",
        bytes_per_sec / 1e9,
        bytes_per_sec * 8.0 / 1e9,
        ns_per_copy,
        wire_ns(100.0),
        wire_ns(200.0),
        wire_ns(400.0)
    );
    std::process::ExitCode::SUCCESS
}
