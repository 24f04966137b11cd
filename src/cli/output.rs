//! Printing received messages and session summaries.

use std::io::{self, IsTerminal, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Writes payloads to stdout, one per line. Printers made by [`PayloadPrinter::for_session`]
/// share one buffered stdout behind a lock and write whole lines under it, so the lines of
/// concurrent sessions never mix mid-line.
#[derive(Clone)]
pub struct PayloadPrinter {
    out: Arc<Mutex<Stdout>>,
    /// `"N: "` in front of each line (several sessions at once), or nothing.
    prefix: String,
    quiet: bool,
}

/// The stdout all printers of a process share.
struct Stdout {
    out: io::BufWriter<io::Stdout>,
    flush_each: bool,
    pending: usize,
    /// Writing failed once: nothing more is printed.
    failed: bool,
}

impl PayloadPrinter {
    /// A printer; `quiet` prints nothing.
    pub fn new(quiet: bool) -> Self {
        let stdout = io::stdout();
        let flush_each = stdout.is_terminal();
        Self {
            out: Arc::new(Mutex::new(Stdout {
                out: io::BufWriter::with_capacity(64 * 1024, stdout),
                flush_each,
                pending: 0,
                failed: false,
            })),
            prefix: String::new(),
            quiet,
        }
    }

    /// A printer for session `n` on the same stdout, each line prefixed with `n: `.
    pub fn for_session(&self, n: u64) -> Self {
        Self {
            out: self.out.clone(),
            prefix: format!("{n}: "),
            quiet: self.quiet,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Stdout> {
        // A panic while printing leaves nothing half-done that matters: keep printing.
        self.out.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prints one payload: printable UTF-8 as is (with a `\\` in front when it starts with `<`
    /// or `\\`), anything else as a length and hex summary in angle brackets.
    pub fn print(&mut self, payload: &[u8]) {
        if self.quiet {
            return;
        }
        let text = printable_text(payload);
        let summary = if text.is_none() {
            summarize(payload)
        } else {
            String::new()
        };
        let prefix = self.prefix.as_str();
        let mut stdout = self.lock();
        if stdout.failed {
            return;
        }
        let result = match text {
            // A text that starts like a summary (or like an escaped text) gets a backslash,
            // so a line starting with `<` is always one of our summaries.
            Some(s) if s.starts_with(['<', '\\']) => writeln!(stdout.out, "{prefix}\\{s}"),
            Some(s) => writeln!(stdout.out, "{prefix}{s}"),
            None => writeln!(stdout.out, "{prefix}{summary}"),
        };
        stdout.pending += 1;
        let result = result.and_then(|()| {
            if stdout.flush_each || stdout.pending >= 1024 {
                stdout.pending = 0;
                stdout.out.flush()
            } else {
                Ok(())
            }
        });
        if let Err(e) = result {
            log::warn!("cannot write to stdout ({e}); no more payloads will be printed");
            stdout.failed = true;
        }
    }

    /// Flushes what is buffered.
    pub fn flush(&mut self) {
        let mut stdout = self.lock();
        stdout.pending = 0;
        if let Err(e) = stdout.out.flush() {
            log::warn!("cannot write to stdout ({e})");
        }
    }
}

/// The payload as text when it is non-empty UTF-8 that prints as what it says: no control
/// characters, and none of the invisible characters that reorder or hide text on a terminal
/// (bidirectional overrides and isolates, zero-width characters, the byte-order mark).
pub fn printable_text(payload: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(payload).ok()?;
    let misleading = |c: char| {
        c.is_control()
            || matches!(c,
                '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
    };
    (!s.is_empty() && !s.chars().any(misleading)).then_some(s)
}

/// `<N bytes: 00 01 ...>` with at most 16 bytes shown.
pub fn summarize(payload: &[u8]) -> String {
    let shown: Vec<String> = payload
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    let more = if payload.len() > 16 { " ..." } else { "" };
    if payload.is_empty() {
        "<0 bytes>".to_owned()
    } else {
        format!("<{} bytes: {}{more}>", payload.len(), shown.join(" "))
    }
}

/// One-line summary: messages, bytes, seconds, rates.
/// `transport` is named at the end: a summary never leaves open whether RDMA ran.
pub fn summary_line(
    messages: u64,
    bytes: u64,
    elapsed: Duration,
    resuming: Duration,
    transport: &str,
) -> String {
    let moving = elapsed.saturating_sub(resuming);
    let secs = moving.as_secs_f64().max(1e-9);
    let rates_over = if resuming.is_zero() {
        String::new()
    } else {
        format!(
            "; rates over the {:.3} s data moved, {:.3} s resuming left out",
            moving.as_secs_f64(),
            resuming.as_secs_f64()
        )
    };
    format!(
        "{messages} messages, {bytes} bytes in {:.3} s ({:.0} msg/s, {:.2} MiB/s, {:.3} Gb/s{rates_over}) over {transport}",
        elapsed.as_secs_f64(),
        messages as f64 / secs,
        bytes as f64 / secs / (1024.0 * 1024.0),
        bytes as f64 * 8.0 / secs / 1e9
    )
}

/// Builds the client's messages: message `i` is the decimal counter, padded with a letter
/// pattern (`a`..`z`, again and again, from the first byte after the digits) or cut to exactly
/// `size` bytes when a size is given.
///
/// The buffer is built once and then only the counter's digits are written per message; the
/// padding is rebuilt only when the counter gains a digit (at 10, 100, ...), so a 64 KiB message
/// costs its digits, not 65,536 byte writes.
#[derive(Debug, Default)]
pub struct Payloads {
    buf: Vec<u8>,
    size: Option<usize>,
    /// The digit count the padding was laid out for (0: not built yet).
    digits: usize,
}

impl Payloads {
    /// Messages of exactly `size` bytes, or just the counter with `None`.
    pub fn new(size: Option<usize>) -> Self {
        Self {
            // The first message sizes it (fallibly: see `message`); the counter needs 20.
            buf: Vec::with_capacity(20),
            size,
            digits: 0,
        }
    }

    /// Message `i`.
    ///
    /// # Errors
    /// The buffer for `size` bytes cannot be allocated.
    pub fn message(&mut self, i: u64) -> anyhow::Result<&[u8]> {
        let mut text = [0u8; 20];
        let digits = decimal(i, &mut text);
        match self.size {
            None => {
                self.buf.clear();
                self.buf.extend_from_slice(digits);
            }
            Some(size) => {
                if self.digits != digits.len() {
                    self.buf.clear();
                    // --size is bounded by --max-msg-size, which the session's slots already
                    // took: a failure here is memory the machine no longer has.
                    self.buf.try_reserve_exact(size).map_err(|_| {
                        anyhow::anyhow!(
                            "cannot allocate a {size}-byte message buffer (--size): the machine \
                             has not that much memory left"
                        )
                    })?;
                    self.buf.resize(size, 0);
                    let start = digits.len().min(size);
                    for (k, b) in self.buf[start..].iter_mut().enumerate() {
                        *b = b'a' + (k % 26) as u8;
                    }
                    self.digits = digits.len();
                }
                let shown = digits.len().min(size);
                self.buf[..shown].copy_from_slice(&digits[..shown]);
            }
        }
        Ok(&self.buf)
    }
}

/// `i` in decimal, written at the end of `out`; returns the digits.
fn decimal(mut i: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut at = out.len();
    loop {
        at -= 1;
        out[at] = b'0' + (i % 10) as u8;
        i /= 10;
        if i == 0 {
            return &out[at..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misleading_text_is_not_printed_as_text() {
        assert_eq!(printable_text(b"hello"), Some("hello"));
        assert_eq!(printable_text(b""), None);
        assert_eq!(printable_text("abc\u{202E}fed".as_bytes()), None);
        assert_eq!(printable_text("a\u{200B}b".as_bytes()), None);
        assert_eq!(printable_text(b"tab\there"), None);
        assert_eq!(printable_text(&[0xff, 0xfe]), None);
        assert_eq!(summarize(b""), "<0 bytes>");
    }

    /// The simple, slow definition the builder must match byte for byte.
    fn reference_payload(i: u64, size: Option<usize>) -> Vec<u8> {
        let digits = i.to_string();
        match size {
            None => digits.into_bytes(),
            Some(size) => {
                let mut v: Vec<u8> = digits.bytes().take(size).collect();
                let pad = size - v.len();
                v.extend((0..pad).map(|k| b'a' + (k % 26) as u8));
                v
            }
        }
    }

    #[test]
    fn payloads_are_the_counter_padded_with_letters_across_digit_changes() {
        for size in [
            None,
            Some(0),
            Some(1),
            Some(2),
            Some(3),
            Some(64),
            Some(65536),
        ] {
            let mut p = Payloads::new(size);
            let counters = (0..120).chain([999, 1000, 1001, 99_999, 100_000, u64::MAX]);
            for i in counters {
                assert_eq!(
                    p.message(i).expect("a buffer"),
                    reference_payload(i, size),
                    "{i} {size:?}"
                );
            }
        }
        assert_eq!(
            Payloads::new(Some(30)).message(7).expect("a buffer"),
            b"7abcdefghijklmnopqrstuvwxyzabc"
        );
    }
}
