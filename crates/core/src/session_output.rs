//! A session's output buffer, shared by the process backend's supervisor and
//! the microVM guest agent: the last `cap` bytes of the session's combined
//! output at offsets that only grow, plus which byte ranges came from
//! stderr, so a read can return the combined window (as it always did) and
//! the same window split into stdout and stderr.

use std::collections::VecDeque;

use crate::exec::{SessionOutput, Stream};

/// Bounded combined output with its stderr ranges.
#[derive(Debug, Default)]
pub struct OutputBuffer {
    data: VecDeque<u8>,
    /// Offset of `data[0]`.
    start: u64,
    /// Absolute `[start, end)` ranges of stderr bytes, sorted, disjoint and
    /// never adjacent (neighbours are merged); none ends before `start`.
    stderr: VecDeque<(u64, u64)>,
}

impl OutputBuffer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Offset of the first byte still kept.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Offset just past the last byte produced (the total ever produced).
    pub fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }

    /// Append `bytes` from `stream`, keeping at most `cap` bytes (the oldest
    /// are dropped; offsets keep counting them).
    pub fn push(&mut self, stream: Stream, bytes: &[u8], cap: usize) {
        if bytes.is_empty() {
            return;
        }
        let at = self.end();
        self.data.extend(bytes);
        if stream == Stream::Stderr {
            let end = at + bytes.len() as u64;
            match self.stderr.back_mut() {
                Some(last) if last.1 == at => last.1 = end,
                _ => self.stderr.push_back((at, end)),
            }
        }
        let excess = self.data.len().saturating_sub(cap);
        if excess > 0 {
            self.data.drain(..excess);
            self.start += excess as u64;
            while self.stderr.front().is_some_and(|r| r.1 <= self.start) {
                self.stderr.pop_front();
            }
            if let Some(first) = self.stderr.front_mut() {
                first.0 = first.0.max(self.start);
            }
        }
    }

    /// At most `limit` bytes from `offset` (moved to the window's start when
    /// older output was dropped), with the stderr ranges inside them.
    pub fn read(
        &self,
        offset: u64,
        limit: usize,
        running: bool,
        exit_code: Option<i32>,
    ) -> SessionOutput {
        let from = offset.clamp(self.start, self.end());
        let skip = (from - self.start) as usize;
        let take = (self.data.len() - skip).min(limit);
        let to = from + take as u64;
        let data: Vec<u8> = self.data.range(skip..skip + take).copied().collect();
        let stderr = self
            .stderr
            .iter()
            .filter(|r| r.1 > from && r.0 < to)
            .map(|r| [r.0.max(from), r.1.min(to)])
            .collect();
        SessionOutput {
            offset: from,
            data,
            next_offset: to,
            running,
            exit_code,
            stderr,
        }
    }
}

impl SessionOutput {
    /// The window split into its stdout and its stderr bytes (each in the
    /// order produced). Output of a terminal, or from an agent that does not
    /// report ranges, is all stdout.
    pub fn split(&self) -> (Vec<u8>, Vec<u8>) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut at = self.offset;
        let end = self.offset + self.data.len() as u64;
        let slice =
            |a: u64, b: u64| &self.data[(a - self.offset) as usize..(b - self.offset) as usize];
        for r in &self.stderr {
            let (a, b) = (r[0].clamp(at, end), r[1].clamp(at, end));
            out.extend_from_slice(slice(at, a));
            err.extend_from_slice(slice(a, b));
            at = b;
        }
        out.extend_from_slice(slice(at, end));
        (out, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: every byte with its stream, all ever produced.
    fn model(chunks: &[(Stream, Vec<u8>)]) -> Vec<(u8, Stream)> {
        chunks
            .iter()
            .flat_map(|(s, b)| b.iter().map(move |&x| (x, *s)))
            .collect()
    }

    /// Whatever the interleaving, cap and read window, the combined data is
    /// the produced bytes at their absolute offsets and the split gives each
    /// stream's bytes of that window in order.
    #[test]
    fn windows_split_into_the_streams_they_came_from() {
        let mut chunks = Vec::new();
        for i in 0..200u32 {
            let s = if (i * 7) % 3 == 0 {
                Stream::Stderr
            } else {
                Stream::Stdout
            };
            let len = (i % 13) as usize;
            chunks.push((s, (0..len).map(|j| (i as usize * 31 + j) as u8).collect()));
        }
        let all = model(&chunks);
        for cap in [1usize, 5, 64, 500, 10_000] {
            let mut b = OutputBuffer::new();
            for (s, c) in &chunks {
                b.push(*s, c, cap);
            }
            let kept = all.len().min(cap);
            assert_eq!(b.end() as usize, all.len());
            assert_eq!(b.start() as usize, all.len() - kept);
            for offset in [0, b.start(), b.start() + 3, b.end() - 1, b.end(), u64::MAX] {
                for limit in [1usize, 4, 100, usize::MAX] {
                    let out = b.read(offset, limit, true, None);
                    let from = offset.clamp(b.start(), b.end()) as usize;
                    let to = (from + limit.min(all.len() - from)).min(all.len());
                    let window = &all[from..to];
                    assert_eq!(out.offset as usize, from);
                    assert_eq!(out.next_offset as usize, to);
                    let want: Vec<u8> = window.iter().map(|x| x.0).collect();
                    assert_eq!(out.data, want, "cap {cap} offset {offset} limit {limit}");
                    let (o, e) = out.split();
                    let pick = |s: Stream| -> Vec<u8> {
                        window.iter().filter(|x| x.1 == s).map(|x| x.0).collect()
                    };
                    assert_eq!(o, pick(Stream::Stdout));
                    assert_eq!(e, pick(Stream::Stderr));
                }
            }
        }
    }

    #[test]
    fn output_without_ranges_is_all_stdout() {
        let out = SessionOutput {
            offset: 10,
            data: b"abc".to_vec(),
            next_offset: 13,
            running: false,
            exit_code: Some(0),
            stderr: Vec::new(),
        };
        assert_eq!(out.split(), (b"abc".to_vec(), Vec::new()));
    }
}

#[cfg(test)]
mod signal_tests {
    use crate::SessionSignal;

    #[test]
    fn signal_names_parse_with_or_without_sig_and_round_trip_numbers() {
        assert_eq!(SessionSignal::parse("INT").unwrap().number(), 2);
        assert_eq!(
            SessionSignal::parse("sigterm").unwrap(),
            SessionSignal::Term
        );
        assert_eq!(SessionSignal::parse("Hup").unwrap().number(), 1);
        assert!(SessionSignal::parse("STOP").is_err());
        assert!(SessionSignal::parse("9").is_err());
        for n in [1, 2, 3, 9, 10, 12, 15] {
            assert_eq!(SessionSignal::from_number(n).unwrap().number(), n);
        }
        assert!(SessionSignal::from_number(19).is_err());
    }
}
