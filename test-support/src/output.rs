//! Reading the binary's output.

/// Checks that `text` is exactly the lines "0", "1", ... "n-1"; the error names the first
/// line that differs.
pub fn check_counting(text: &str, n: u64) -> Result<(), String> {
    let mut count = 0u64;
    for (i, line) in text.split_terminator('\n').enumerate() {
        if line != i.to_string() {
            return Err(format!("line {i} is {line:?}, expected \"{i}\""));
        }
        count += 1;
    }
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the last line is not terminated".to_owned());
    }
    if count != n {
        return Err(format!("{count} line(s), expected {n}"));
    }
    Ok(())
}

/// N in "peer lost (...) after N message(s) had arrived" (the count a peer-lost error carries),
/// from the last such phrase in `text`.
pub fn lost_after(text: &str) -> Option<u64> {
    let (_, rest) = text.rsplit_once(") after ")?;
    rest.split(' ').next()?.parse().ok()
}

/// The number N in the first "`verb` N messages" of `text` (e.g. "sent 10 messages").
pub fn messages_after(text: &str, verb: &str) -> Option<u64> {
    let prefix = format!("{verb} ");
    text.split(prefix.as_str()).skip(1).find_map(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let after = &rest[digits.len()..];
        (!digits.is_empty() && after.starts_with(" messages"))
            .then(|| digits.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_of_a_peer_lost_line_is_read() {
        let line = "sending message 52 failed: peer lost (reset (os error 104)) after 50 message(s) had arrived";
        assert_eq!(lost_after(line), Some(50));
        assert_eq!(lost_after("peer rejected the session: busy"), None);
    }
}
