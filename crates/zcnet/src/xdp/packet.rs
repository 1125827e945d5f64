//! A packet received or sent in several UMEM frames (multi-buffer, `XDP_USE_SG`).

use crate::sys::frame_area::Frame;

/// The frames of one packet, in order: every frame but the last [`continues`](Frame::continues)
/// into the next. A packet of one frame is the single-buffer case. The frame-token rules hold: the
/// packet owns its frames, and [`Packet::into_frames`] hands them on (to a fill ring, a tx ring, or
/// the free list).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a dropped packet leaks its frames: release them, fill them or transmit them"]
pub struct Packet {
    frames: Vec<Frame>,
}

impl Packet {
    /// The packet made of `frames` in order: marks every frame but the last as continued, and the
    /// last as the packet's end (ready for [`Socket::transmit`](crate::xdp::Socket::transmit)).
    pub fn new(mut frames: Vec<Frame>) -> Packet {
        let last = frames.len().saturating_sub(1);
        for (i, frame) in frames.iter_mut().enumerate() {
            frame.set_continues(i < last);
        }
        Packet { frames }
    }

    /// Frames as the rx ring delivered them (already marked).
    pub(crate) fn received(frames: Vec<Frame>) -> Packet {
        Packet { frames }
    }

    /// The frames, in order.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// Mutable access to the frames (to write them; the continuation marks are the packet's).
    pub fn frames_mut(&mut self) -> &mut [Frame] {
        &mut self.frames
    }

    /// The frames, in order, with their continuation marks.
    pub fn into_frames(self) -> Vec<Frame> {
        self.frames
    }

    /// Packet length in bytes: the sum of its frames' lengths.
    pub fn len(&self) -> usize {
        self.frames.iter().map(|f| f.len() as usize).sum()
    }

    /// Whether the packet has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
