//! What a peer or stranger says, made fit for our log; repeated events made one line.
//!
//! Rules:
//! - text a peer chose (a Reject's reason, anything it sent that we show) reaches a log or an
//!   error message only through [`peer_text`]: control characters (terminal escapes, carriage
//!   returns, line ends) appear as escapes, and at most `MAX_SHOWN` characters are shown;
//! - an event strangers can repeat at will is logged through a `RateLimitedLog`: the first
//!   at once, then at most one line per `LOG_INTERVAL`, with the count so far.

use std::fmt::Write;
use std::time::{Duration, Instant};

/// Characters of peer text shown; the rest is counted. As long as the longest Reject reason
/// the wire carries (512 bytes), so that our own server's explanations arrive whole.
pub(crate) const MAX_SHOWN: usize = 512;
/// At most one line per this interval for one kind of repeated event.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// `text` as a log may show it: control characters escaped (`\n`, `\r`, `\t`, `\u{1b}`...),
/// cut after 512 (`MAX_SHOWN`) characters with the number of characters left out.
pub fn peer_text(text: &str) -> String {
    let mut shown = String::with_capacity(text.len().min(MAX_SHOWN * 2));
    let mut chars = text.chars();
    for c in chars.by_ref().take(MAX_SHOWN) {
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}') {
            let _ = write!(shown, "{}", c.escape_default());
        } else {
            shown.push(c);
        }
    }
    let left = chars.count();
    if left > 0 {
        let _ = write!(shown, "... ({left} more characters)");
    }
    shown
}

/// Counts a repeated event and logs it at most once per [`LOG_INTERVAL`], with the count.
#[derive(Debug)]
pub(crate) struct RateLimitedLog {
    what: &'static str,
    count: u64,
    last: Option<Instant>,
}

impl RateLimitedLog {
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            what,
            count: 0,
            last: None,
        }
    }

    /// One more event; logged (with its detail and the count so far) when the last line is
    /// [`LOG_INTERVAL`] old.
    pub(crate) fn hit(&mut self, detail: &dyn std::fmt::Display) {
        if self.should_log(Instant::now()) {
            log::warn!("{} ({detail}; {} time(s) so far)", self.what, self.count);
        }
    }

    /// Events so far.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Counts one event at `now`; whether it gets a line.
    fn should_log(&mut self, now: Instant) -> bool {
        self.count += 1;
        let due = self
            .last
            .is_none_or(|t| now.saturating_duration_since(t) >= LOG_INTERVAL);
        if due {
            self.last = Some(now);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_peer_text_are_shown_as_escapes() {
        assert_eq!(
            peer_text("ok\x1b[2J\r\nfake line\tend\u{7f}"),
            "ok\\u{1b}[2J\\r\\nfake line\\tend\\u{7f}"
        );
        assert_eq!(peer_text("plain words, é ü"), "plain words, é ü");
        assert_eq!(peer_text("\u{202e}abc"), "\\u{202e}abc");
    }

    #[test]
    fn long_peer_text_is_cut_with_a_count() {
        let long = "x".repeat(MAX_SHOWN + 55);
        let shown = peer_text(&long);
        assert!(shown.starts_with(&"x".repeat(MAX_SHOWN)));
        assert!(shown.ends_with("... (55 more characters)"), "{shown}");
        assert_eq!(peer_text(&"y".repeat(MAX_SHOWN)), "y".repeat(MAX_SHOWN));
    }

    #[test]
    fn a_flood_of_events_gets_one_line_a_second_with_the_count() {
        let mut log = RateLimitedLog::new("test");
        let t0 = Instant::now();
        let lines: Vec<bool> = (0..300)
            .map(|i| log.should_log(t0 + Duration::from_millis(i * 10)))
            .collect();
        // 3 s of events every 10 ms: one line at 0, 1 s and 2 s.
        assert_eq!(lines.iter().filter(|l| **l).count(), 3);
        assert!(lines[0] && lines[100] && lines[200]);
        assert_eq!(log.count, 300);
    }
}
