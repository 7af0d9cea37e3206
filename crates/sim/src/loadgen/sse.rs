//! Incremental Server-Sent-Events parser: bytes in (split anywhere), the `data`
//! payload of each complete event out. SGLang only sends `data:` lines, but the
//! parser follows the SSE rules (comments, other fields, CRLF, multi-line data).

/// Accumulates bytes until events are complete.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds bytes; returns the data of every event completed by them.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&bytes[..nl], &bytes[nl + 1..]);
            bytes = rest;
            if self.line.is_empty() {
                self.take_line(strip_cr(head), &mut events);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                self.take_line(strip_cr(&line), &mut events);
                line.clear();
                self.line = line;
            }
        }
        self.line.extend_from_slice(bytes);
        events
    }

    /// Ends the stream: a last event not followed by a blank line is still returned.
    pub fn finish(mut self) -> Option<String> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.take_line(&line, &mut events);
        }
        events.pop().or(self.data)
    }

    fn take_line(&mut self, line: &[u8], events: &mut Vec<String>) {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                events.push(data);
            }
            return;
        }
        if line[0] == b':' {
            return; // comment
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        if field == b"data" {
            let value = String::from_utf8_lossy(value);
            match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            }
        }
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks() {
        let stream = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
        for cut in 0..stream.len() {
            let mut p = SseParser::new();
            let mut got = p.push(&stream[..cut]);
            got.extend(p.push(&stream[cut..]));
            assert_eq!(
                got,
                vec!["{\"a\":1}", "{\"b\":2}", "[DONE]"],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn crlf_comments_other_fields_and_multiline_data() {
        let mut p = SseParser::new();
        let got = p.push(b": keep-alive\r\nevent: x\r\nid: 3\r\ndata: one\r\ndata:two\r\n\r\n");
        assert_eq!(got, vec!["one\ntwo"]);
    }

    #[test]
    fn blank_lines_without_data_yield_nothing() {
        let mut p = SseParser::new();
        assert!(p.push(b"\n\n\n").is_empty());
    }

    #[test]
    fn unterminated_last_event_is_returned_by_finish() {
        let mut p = SseParser::new();
        assert!(p.push(b"data: [DONE]").is_empty());
        assert_eq!(p.finish().as_deref(), Some("[DONE]"));
        let mut p = SseParser::new();
        assert!(p.push(b"data: x\n").is_empty());
        assert_eq!(p.finish().as_deref(), Some("x"));
    }
}
