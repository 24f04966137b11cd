//! The sender's copy on its own: what `RdmaSink::send` does to each message before the NIC
//! (or the kernel) sees it, one `--size`-byte memcpy from the caller's buffer into the next of
//! `--slots` staging slots, on one core, for `--seconds`. Prints the rate, the time per
//! message, and the wire's time for the same bytes at 100, 200 and 400 Gb/s: where the copy is
//! the smaller, `send` keeps up; where it is not, `send_in_place` (no copy) is what reaches line
//! rate. scripts/bench-compare.sh runs it beside `bench --in-place`.
//!
//! `--distance D` places the source so that every slot starts D bytes after it modulo 4 KiB
//! (with a `--size` that is a multiple of 4 KiB, as RDMA slots of a power-of-two size are):
//! 1 to 63 is the near page alias where glibc's `rep movsb` falls off a cliff on AMD EPYC
//! (src/message_copy.rs). `--pieces N` copies in pieces of N bytes, as `send` does there
//! (2048); 0, the default, is one `memcpy` a message.
//!
//! `cargo run --release --example copy_cost -- --size 65536 --slots 64 --seconds 2`
//! `cargo run --release --example copy_cost -- --size 65536 --distance 16 --pieces 2048`

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
            std::env::args()
                .any(|a| a == "--distance")
                .then_some(arg("--distance", 0)?),
            arg("--pieces", 0)?,
        ))
    })();
    let (size, slots, seconds, distance, pieces) = match parsed {
        Ok((size, slots, seconds, distance, pieces))
            if size > 0
                && slots > 0
                && size * slots <= 1 << 32
                && distance.is_none_or(|d| d < 4096) =>
        {
            (
                size as usize,
                slots as usize,
                seconds,
                distance,
                pieces as usize,
            )
        }
        Ok(_) => {
            eprintln!(
                "copy_cost: --size and --slots must be positive, their product at most 4 GiB; \
                 --distance below 4096"
            );
            return std::process::ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("copy_cost: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut staging = vec![0u8; size * slots];
    let source_buffer = vec![0x5au8; size + 4096];
    // where the source starts in its buffer: `distance` bytes before the slots modulo 4 KiB
    let from = distance.map_or(0, |d| {
        (staging.as_ptr() as usize)
            .wrapping_sub(d as usize)
            .wrapping_sub(source_buffer.as_ptr() as usize)
            % 4096
    });
    let source = &source_buffer[from..from + size];
    let shown_distance = (staging.as_ptr() as usize).wrapping_sub(source.as_ptr() as usize) % 4096;
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut copies = 0u64;
    while Instant::now() < until {
        // a block of copies per clock read
        for _ in 0..64 {
            let at = (copies as usize % slots) * size;
            let slot = &mut staging[at..at + size];
            if pieces == 0 {
                slot.copy_from_slice(black_box(source));
            } else {
                for (to, from) in slot
                    .chunks_mut(pieces)
                    .zip(black_box(source).chunks(pieces))
                {
                    to.copy_from_slice(from);
                }
            }
            black_box(&mut staging);
            copies += 1;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let bytes_per_sec = (copies as f64 * size as f64) / secs;
    let ns_per_copy = secs * 1e9 / copies as f64;
    let wire_ns = |gbits: f64| size as f64 * 8.0 / gbits;
    println!(
        "COPY-COST size={size} slots={slots} distance={shown_distance} pieces={pieces} rate={:.2}GB/s ({:.0}Gb/s) per_message={:.0}ns wire_ns@100G={:.0} @200G={:.0} @400G={:.0}",
        bytes_per_sec / 1e9,
        bytes_per_sec * 8.0 / 1e9,
        ns_per_copy,
        wire_ns(100.0),
        wire_ns(200.0),
        wire_ns(400.0)
    );
    std::process::ExitCode::SUCCESS
}
