//! Bounded line framing of chunked process output.
//!
//! Owns splitting bytes into `\n`-terminated lines (a trailing `\r` is removed) across chunk
//! boundaries, with a cap on line length so a provider that never ends a line cannot grow a
//! driver's memory without bound. Knows nothing of JSON or any protocol.

/// One framed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line without its terminator. Bytes need not be valid UTF-8.
    Complete(Vec<u8>),
    /// A line longer than the framer's limit: its length and its first bytes (at most
    /// [`OVERSIZED_HEAD`]). The rest of that line is discarded up to its terminator.
    Oversized {
        /// The first bytes of the line (at most [`OVERSIZED_HEAD`]).
        head: Vec<u8>,
        /// Total length of the line seen so far when it was cut (at least limit + 1).
        len: usize,
    },
}

/// Splits chunks into lines; at most `max_line` bytes are buffered.
#[derive(Debug, Clone)]
pub struct LineFramer {
    buf: Vec<u8>,
    max_line: usize,
    /// Inside an oversized line: bytes seen so far; the line is reported when it ends.
    skipping: Option<usize>,
}

/// Default line limit: 8 MiB. Drivers run with a 64 MiB memory cap by default; a line is
/// buffered once, and growth is bounded so the buffer never needs more than about 1.5× this.
pub const DEFAULT_MAX_LINE: usize = 8 * 1024 * 1024;

/// Bytes of an oversized line kept for diagnostics.
pub const OVERSIZED_HEAD: usize = 1024;

impl Default for LineFramer {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_LINE)
    }
}

impl LineFramer {
    /// A framer that buffers lines of at most `max_line` bytes.
    pub fn new(max_line: usize) -> Self {
        Self {
            buf: Vec::new(),
            max_line: max_line.max(1),
            skipping: None,
        }
    }

    /// Feed a chunk; returns the lines completed by it, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Line> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        while !rest.is_empty() {
            let newline = rest.iter().position(|&b| b == b'\n');
            let (part, ended) = match newline {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            rest = match newline {
                Some(i) => &rest[i + 1..],
                None => &[],
            };
            if let Some(seen) = self.skipping.as_mut() {
                *seen += part.len();
                let keep = OVERSIZED_HEAD
                    .saturating_sub(self.buf.len())
                    .min(part.len());
                self.buf.extend_from_slice(&part[..keep]);
                if ended {
                    let len = *seen;
                    self.skipping = None;
                    lines.push(Line::Oversized {
                        head: std::mem::take(&mut self.buf),
                        len,
                    });
                }
                continue;
            }
            if self.buf.len() + part.len() > self.max_line {
                let total = self.buf.len() + part.len();
                let keep = OVERSIZED_HEAD
                    .saturating_sub(self.buf.len())
                    .min(part.len());
                self.buf.extend_from_slice(&part[..keep]);
                self.buf.truncate(OVERSIZED_HEAD);
                self.buf.shrink_to_fit();
                if ended {
                    lines.push(Line::Oversized {
                        head: std::mem::take(&mut self.buf),
                        len: total,
                    });
                } else {
                    self.skipping = Some(total);
                }
                continue;
            }
            self.grow_for(part.len());
            self.buf.extend_from_slice(part);
            if ended {
                let mut line = std::mem::take(&mut self.buf);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                lines.push(Line::Complete(line));
            }
        }
        lines
    }

    /// Reserve room for `extra` more bytes: doubling, but never beyond the line limit, so a
    /// long line does not leave a buffer twice the limit behind.
    fn grow_for(&mut self, extra: usize) {
        let needed = self.buf.len() + extra;
        if needed > self.buf.capacity() {
            let target = needed.max(self.buf.capacity() * 2).min(self.max_line);
            self.buf.reserve_exact(target - self.buf.len());
        }
    }

    /// End of stream: the unterminated rest, if any (a truncated last line).
    pub fn finish(&mut self) -> Option<Line> {
        if let Some(len) = self.skipping.take() {
            return Some(Line::Oversized {
                head: std::mem::take(&mut self.buf),
                len,
            });
        }
        if self.buf.is_empty() {
            None
        } else {
            Some(Line::Complete(std::mem::take(&mut self.buf)))
        }
    }

    /// True when a partial line is buffered.
    pub fn has_partial(&self) -> bool {
        !self.buf.is_empty() || self.skipping.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(s: &str) -> Line {
        Line::Complete(s.as_bytes().to_vec())
    }

    #[test]
    fn splits_across_chunks_and_strips_cr() {
        let mut f = LineFramer::new(64);
        assert_eq!(f.push(b"ab"), vec![]);
        assert_eq!(f.push(b"c\r\nde\nf"), vec![complete("abc"), complete("de")]);
        assert!(f.has_partial());
        assert_eq!(f.finish(), Some(complete("f")));
        assert_eq!(f.finish(), None);
    }

    #[test]
    fn every_split_gives_the_same_lines() {
        let data = b"one\ntwo\r\n\nthree\nfour";
        let mut whole = LineFramer::new(64);
        let mut expected = whole.push(data);
        expected.extend(whole.finish());
        for cut in 0..=data.len() {
            let mut f = LineFramer::new(64);
            let mut got = f.push(&data[..cut]);
            got.extend(f.push(&data[cut..]));
            got.extend(f.finish());
            assert_eq!(got, expected, "cut at {cut}");
        }
    }

    #[test]
    fn oversized_lines_are_bounded_and_reported() {
        let mut f = LineFramer::new(4);
        let got = f.push(b"abcdefgh");
        assert!(got.is_empty());
        assert!(f.buf.len() <= OVERSIZED_HEAD);
        let got = f.push(b"ij\nok\n");
        assert_eq!(
            got,
            vec![
                Line::Oversized {
                    head: b"abcdefghij".to_vec(),
                    len: 10
                },
                complete("ok")
            ]
        );
    }
}
