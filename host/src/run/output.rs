//! The output budget of one run: how many stdout + stderr bytes the host keeps
//! (`max_output_bytes`) and how long a line may grow on either stream (`max_line_bytes`).
//! The first chunk past either limit stops the provider; it and everything after it is
//! discarded and counted, never silently lost.
//!
//! Pure: no I/O. The supervisor asks [`OutputBudget::admit`] for every chunk before keeping
//! it.

use crate::result::StreamKind;

/// What to do with a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Admit {
    /// Keep it (raw capture, events, the driver).
    Keep,
    /// This chunk broke a limit: stop the provider (the reason says which limit); the chunk
    /// is discarded.
    Overflow(String),
    /// A limit was already broken: discard (and count) it.
    Discard,
}

/// Limits and the running counts of one run's output.
#[derive(Debug, Clone)]
pub(super) struct OutputBudget {
    max_bytes: usize,
    max_line: usize,
    kept: usize,
    /// Length of the current, unterminated line on stdout and on stderr.
    line_len: [usize; 2],
    overflow: Option<String>,
    discarded: u64,
}

impl OutputBudget {
    /// A budget of `max_bytes` in all and `max_line` bytes between newlines per stream.
    pub(super) fn new(max_bytes: usize, max_line: usize) -> Self {
        Self {
            max_bytes,
            max_line,
            kept: 0,
            line_len: [0, 0],
            overflow: None,
            discarded: 0,
        }
    }

    /// Account for `chunk` read from `stream` and say what to do with it.
    pub(super) fn admit(&mut self, stream: StreamKind, chunk: &[u8]) -> Admit {
        if self.overflow.is_some() {
            self.discarded += chunk.len() as u64;
            return Admit::Discard;
        }
        let line = &mut self.line_len[usize::from(stream != StreamKind::Stdout)];
        // One pass: the first piece continues the current line, the rest start new ones.
        let mut longest = 0;
        for (i, piece) in chunk.split(|b| *b == b'\n').enumerate() {
            *line = if i == 0 {
                *line + piece.len()
            } else {
                piece.len()
            };
            longest = longest.max(*line);
        }
        let why = if self.kept + chunk.len() > self.max_bytes {
            Some(format!(
                "the provider wrote more than {} bytes (max_output_bytes)",
                self.max_bytes
            ))
        } else if longest > self.max_line {
            Some(format!(
                "the provider wrote a line longer than {} bytes (max_line_bytes)",
                self.max_line
            ))
        } else {
            None
        };
        match why {
            None => {
                self.kept += chunk.len();
                Admit::Keep
            }
            Some(why) => {
                self.overflow = Some(why.clone());
                self.discarded += chunk.len() as u64;
                Admit::Overflow(why)
            }
        }
    }

    /// Which limit stopped the provider, and how many bytes were discarded since — the run's
    /// `output_limit` failure message. `None` when no limit was reached.
    pub(super) fn failure(&self) -> Option<String> {
        self.overflow.as_ref().map(|why| {
            format!(
                "{why}; {} bytes after the limit were discarded",
                self.discarded
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_bytes_are_capped_and_the_rest_counted() {
        let mut b = OutputBudget::new(10, 100);
        assert_eq!(b.admit(StreamKind::Stdout, b"12345\n"), Admit::Keep);
        assert_eq!(b.admit(StreamKind::Stderr, b"123\n"), Admit::Keep);
        assert!(b.failure().is_none());
        // 10 bytes kept; one more is over.
        let Admit::Overflow(why) = b.admit(StreamKind::Stdout, b"abc") else {
            panic!("over the limit");
        };
        assert!(why.contains("max_output_bytes"), "{why}");
        assert_eq!(b.admit(StreamKind::Stdout, b"defgh"), Admit::Discard);
        assert_eq!(
            b.failure().unwrap(),
            format!("{why}; 8 bytes after the limit were discarded")
        );
    }

    #[test]
    fn exactly_the_limit_is_kept() {
        let mut b = OutputBudget::new(4, 100);
        assert_eq!(b.admit(StreamKind::Stdout, b"1234"), Admit::Keep);
        assert!(matches!(
            b.admit(StreamKind::Stdout, b"5"),
            Admit::Overflow(_)
        ));
    }

    #[test]
    fn lines_are_measured_across_chunks_and_per_stream() {
        let mut b = OutputBudget::new(1000, 5);
        assert_eq!(b.admit(StreamKind::Stdout, b"abc"), Admit::Keep);
        // The other stream has its own line.
        assert_eq!(b.admit(StreamKind::Stderr, b"12345"), Admit::Keep);
        // A newline resets the line; "de" continues "abc" to 5, still fine.
        assert_eq!(b.admit(StreamKind::Stdout, b"de\nxy"), Admit::Keep);
        assert_eq!(b.admit(StreamKind::Stdout, b"z\n"), Admit::Keep);
        // "abcdef" split over two chunks is 6 > 5.
        assert_eq!(b.admit(StreamKind::Stdout, b"abc"), Admit::Keep);
        let Admit::Overflow(why) = b.admit(StreamKind::Stdout, b"def") else {
            panic!("line over the limit");
        };
        assert!(why.contains("max_line_bytes"), "{why}");
    }
}
