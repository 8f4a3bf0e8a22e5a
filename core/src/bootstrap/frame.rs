//! Sans-IO decoding of one inbound bootstrap connection: NCCL's generic handshake
//! (u64 magic + u32 socket type, `src/misc/socket.cc`), then 4-byte length-prefixed
//! frames (`bootstrapNetSend`/`bootstrapNetRecv` in NCCL 2.30 `src/bootstrap.cc`).
//!
//! The first frame after the handshake is the connection's *opening* (the root's
//! `extInfo`, a rank's hello, a root reply) and has its own, small length limit; later
//! frames use the connection's message limit. Memory for a frame grows with the bytes
//! that actually arrived (fallibly), never with the length a peer announces.

use super::wire::{HANDSHAKE_BYTES, check_handshake};

/// First reservation for a frame's payload; it then grows with the received bytes.
const INITIAL_RESERVE: usize = 64 * 1024;

/// Why an inbound connection was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum InboundError {
    /// Wrong magic or socket type (what was expected and found).
    Handshake(String),
    /// A frame announced more bytes than allowed.
    TooLong {
        /// Announced length.
        len: usize,
        /// The limit in force.
        max: usize,
        /// Whether this was the opening frame.
        opening: bool,
    },
    /// Growing the frame buffer failed.
    Alloc {
        /// Bytes the buffer needed.
        bytes: usize,
    },
}

impl std::fmt::Display for InboundError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InboundError::Handshake(m) => write!(f, "bad handshake: {m}"),
            InboundError::TooLong { len, max, opening } => write!(
                f,
                "{} announces {len} bytes, more than the limit of {max}",
                if *opening { "the opening message" } else { "a message" }
            ),
            InboundError::Alloc { bytes } => write!(f, "cannot allocate {bytes} bytes for a message"),
        }
    }
}

#[derive(Debug)]
enum State {
    Handshake { buf: [u8; HANDSHAKE_BYTES], got: usize },
    Length { buf: [u8; 4], got: usize },
    Payload { len: usize, buf: Vec<u8> },
}

/// Decoder state of one inbound connection. Feed it the bytes as they arrive with
/// [`Inbound::next_frame`]; it yields the opening frame, then every later frame.
#[derive(Debug)]
pub(crate) struct Inbound {
    magic: u64,
    opening_max: usize,
    frame_max: usize,
    frames: u64,
    state: State,
}

impl Inbound {
    /// A connection that must start with the handshake carrying `magic`, then an
    /// opening frame of at most `opening_max` bytes, then frames of at most `frame_max`.
    pub fn new(magic: u64, opening_max: usize, frame_max: usize) -> Self {
        Inbound {
            magic,
            opening_max,
            frame_max,
            frames: 0,
            state: State::Handshake {
                buf: [0; HANDSHAKE_BYTES],
                got: 0,
            },
        }
    }

    /// Consumes bytes from the front of `input` until one frame is complete (returned)
    /// or `input` is empty (`Ok(None)`). Errors are final for the connection.
    pub fn next_frame(&mut self, input: &mut &[u8]) -> Result<Option<Vec<u8>>, InboundError> {
        loop {
            match &mut self.state {
                State::Handshake { buf, got } => {
                    let n = take_into(&mut buf[*got..], input);
                    *got += n;
                    if *got < HANDSHAKE_BYTES {
                        return Ok(None);
                    }
                    check_handshake(buf, self.magic).map_err(InboundError::Handshake)?;
                    self.state = State::Length { buf: [0; 4], got: 0 };
                }
                State::Length { buf, got } => {
                    let n = take_into(&mut buf[*got..], input);
                    *got += n;
                    if *got < 4 {
                        return Ok(None);
                    }
                    let len = u32::from_ne_bytes(*buf) as usize;
                    let opening = self.frames == 0;
                    let max = if opening { self.opening_max } else { self.frame_max };
                    if len > max {
                        return Err(InboundError::TooLong { len, max, opening });
                    }
                    let mut v = Vec::new();
                    v.try_reserve_exact(len.min(INITIAL_RESERVE))
                        .map_err(|_| InboundError::Alloc { bytes: len })?;
                    self.state = State::Payload { len, buf: v };
                }
                State::Payload { len, buf } => {
                    let want = *len - buf.len();
                    let n = want.min(input.len());
                    buf.try_reserve(n).map_err(|_| InboundError::Alloc { bytes: *len })?;
                    buf.extend_from_slice(&input[..n]);
                    *input = &input[n..];
                    if buf.len() < *len {
                        return Ok(None);
                    }
                    let frame = std::mem::take(buf);
                    self.frames += 1;
                    self.state = State::Length { buf: [0; 4], got: 0 };
                    return Ok(Some(frame));
                }
            }
        }
    }

    /// What a connection that ends now leaves unfinished, for error messages:
    /// `None` at a frame boundary after the handshake, else e.g.
    /// "after 100 of 176 bytes of the opening message".
    pub fn partial(&self) -> Option<String> {
        let which = if self.frames == 0 {
            "the opening message"
        } else {
            "a message"
        };
        match &self.state {
            State::Handshake { got, .. } => Some(format!("after {got} of {HANDSHAKE_BYTES} handshake bytes")),
            State::Length { got: 0, .. } if self.frames > 0 => None,
            State::Length { got, .. } => Some(format!("after {got} of 4 length bytes of {which}")),
            State::Payload { len, buf } => Some(format!("after {} of {len} bytes of {which}", buf.len())),
        }
    }
}

fn take_into(dst: &mut [u8], input: &mut &[u8]) -> usize {
    let n = dst.len().min(input.len());
    dst[..n].copy_from_slice(&input[..n]);
    *input = &input[n..];
    n
}

#[cfg(test)]
mod tests {
    use super::super::wire::{SOCKET_TYPE_BOOTSTRAP, encode_handshake};
    use super::*;

    fn frame(p: &[u8]) -> Vec<u8> {
        let mut v = (p.len() as u32).to_ne_bytes().to_vec();
        v.extend_from_slice(p);
        v
    }

    fn stream(magic: u64, frames: &[&[u8]]) -> Vec<u8> {
        let mut v = encode_handshake(magic, SOCKET_TYPE_BOOTSTRAP).to_vec();
        for f in frames {
            v.extend(frame(f));
        }
        v
    }

    #[test]
    fn decodes_in_any_split() {
        let bytes = stream(7, &[b"hello!!!", b"", b"second message"]);
        for chunk in 1..bytes.len() {
            let mut d = Inbound::new(7, 8, 100);
            let mut out = Vec::new();
            for c in bytes.chunks(chunk) {
                let mut input = c;
                while let Some(f) = d.next_frame(&mut input).unwrap() {
                    out.push(f);
                }
                assert!(input.is_empty());
            }
            assert_eq!(out, vec![b"hello!!!".to_vec(), vec![], b"second message".to_vec()]);
            assert_eq!(d.partial(), None);
        }
    }

    #[test]
    fn rejects_wrong_magic_type_and_lengths() {
        let mut d = Inbound::new(7, 8, 100);
        let bad = encode_handshake(8, SOCKET_TYPE_BOOTSTRAP);
        assert!(matches!(d.next_frame(&mut &bad[..]), Err(InboundError::Handshake(m)) if m.contains("magic")));
        let mut d = Inbound::new(7, 8, 100);
        let bad = encode_handshake(7, 2);
        assert!(matches!(d.next_frame(&mut &bad[..]), Err(InboundError::Handshake(m)) if m.contains("type")));
        // Opening over its own limit.
        let mut d = Inbound::new(7, 8, 100);
        let s = stream(7, &[b"nine byte"]);
        assert_eq!(
            d.next_frame(&mut &s[..]),
            Err(InboundError::TooLong {
                len: 9,
                max: 8,
                opening: true
            })
        );
        // A huge announced length never allocates it.
        let mut d = Inbound::new(7, 8, usize::MAX);
        let mut s = stream(7, &[b"ok"]);
        s.extend_from_slice(&u32::MAX.to_ne_bytes());
        s.extend_from_slice(b"abc");
        let mut input = &s[..];
        assert_eq!(d.next_frame(&mut input).unwrap(), Some(b"ok".to_vec()));
        assert_eq!(d.next_frame(&mut input).unwrap(), None);
        assert_eq!(
            d.partial().unwrap(),
            format!("after 3 of {} bytes of a message", u32::MAX)
        );
    }

    #[test]
    fn partial_descriptions() {
        let mut d = Inbound::new(7, 176, 100);
        assert_eq!(d.partial().unwrap(), "after 0 of 12 handshake bytes");
        let s = stream(7, &[&[0u8; 176]]);
        d.next_frame(&mut &s[..100]).unwrap();
        assert_eq!(d.partial().unwrap(), "after 84 of 176 bytes of the opening message");
    }
}
