//! A packet received or sent in several UMEM frames (multi-buffer, `XDP_USE_SG`).

use std::ops::Deref;

use super::umem::Umem;
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

    /// The frames, in order, for writing their bytes and lengths. The continuation marks are the
    /// packet's: a [`PacketFrame`] reads its frame's mark but cannot change it, so the packet stays
    /// whole (every frame but the last continued) on its way to a tx ring.
    ///
    /// ```
    /// fn rewrite(packet: &mut zcnet::xdp::Packet, umem: &mut zcnet::xdp::Umem) {
    ///     for mut frame in packet.frames_mut() {
    ///         frame.bytes_mut(umem).fill(0);
    ///         let len = frame.len();
    ///         frame.set_len(len);
    ///     }
    /// }
    /// ```
    ///
    /// ```compile_fail,E0596
    /// fn split(packet: &mut zcnet::xdp::Packet) {
    ///     for mut frame in packet.frames_mut() {
    ///         frame.set_continues(false); // error[E0596]: cannot borrow data in dereference as mutable
    ///     }
    /// }
    /// ```
    pub fn frames_mut(&mut self) -> impl ExactSizeIterator<Item = PacketFrame<'_>> + '_ {
        self.frames.iter_mut().map(|frame| PacketFrame { frame })
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

/// One frame of a [`Packet`], for writing: its bytes and its length, never its continuation mark
/// (read it through `Deref`: [`Frame::continues`]).
#[derive(Debug)]
pub struct PacketFrame<'a> {
    frame: &'a mut Frame,
}

impl Deref for PacketFrame<'_> {
    type Target = Frame;
    fn deref(&self) -> &Frame {
        self.frame
    }
}

impl PacketFrame<'_> {
    /// Sets the frame's length, as [`Frame::set_len`].
    pub fn set_len(&mut self, len: u32) -> bool {
        self.frame.set_len(len)
    }

    /// The frame's packet bytes, for writing, as [`Umem::bytes_mut`].
    ///
    /// # Panics
    /// When the frame belongs to another UMEM.
    pub fn bytes_mut<'u>(&mut self, umem: &'u mut Umem) -> &'u mut [u8] {
        umem.bytes_mut(self.frame)
    }

    /// The frame's whole buffer from its packet's first byte, as [`Umem::buffer_mut`].
    ///
    /// # Panics
    /// When the frame belongs to another UMEM.
    pub fn buffer_mut<'u>(&mut self, umem: &'u mut Umem) -> &'u mut [u8] {
        umem.buffer_mut(self.frame)
    }
}
