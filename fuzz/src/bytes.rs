//! The byte format every target decodes: a [`Reader`] that turns any byte string into choices,
//! and a [`Writer`] that writes the choices back, so seeds can be built from readable cases.
//!
//! Every choice takes whole bytes, little-endian, and a reader past the end yields zeros, so every
//! input decodes (a short input is a case whose remaining choices are all the first option).
//! A choice below a bound reads the fewest bytes that can hold `bound - 1` and reduces them
//! modulo `bound`: the fuzzer mutates a byte and moves to a neighbouring choice.

/// Decodes choices from fuzz input; never fails.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    data: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, position: 0 }
    }

    /// Whether every byte has been read (later choices are all zero).
    pub fn is_exhausted(&self) -> bool {
        self.position >= self.data.len()
    }

    /// The unread bytes (consumed: the reader is exhausted afterwards).
    pub fn rest(&mut self) -> &'a [u8] {
        let rest = self.data.get(self.position..).unwrap_or_default();
        self.position = self.data.len();
        rest
    }

    /// The next byte, or 0 past the end.
    pub fn byte(&mut self) -> u8 {
        let byte = self.data.get(self.position).copied().unwrap_or(0);
        self.position = self.position.saturating_add(1);
        byte
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut bytes = [0; N];
        for byte in &mut bytes {
            *byte = self.byte();
        }
        bytes
    }

    /// Two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }

    /// Four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }

    /// Eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }

    /// Whether the next byte is odd.
    pub fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A choice in `0..bound` (`bound` at least 1): one byte up to 256 options, two up to 65,536,
    /// eight beyond.
    pub fn below(&mut self, bound: usize) -> usize {
        let bound = bound.max(1);
        let raw = if bound <= 1 << 8 {
            u64::from(self.byte())
        } else if bound <= 1 << 16 {
            u64::from(self.u16())
        } else {
            self.u64()
        };
        (raw % bound as u64) as usize
    }

    /// A choice in `low..=high` (`low <= high`).
    pub fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// One of `options` (which must not be empty).
    pub fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[self.below(options.len())]
    }
}

/// Encodes choices so that a [`Reader`] decodes them back; used to write seed inputs.
#[derive(Clone, Debug, Default)]
pub struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    /// An empty input.
    pub fn new() -> Self {
        Self::default()
    }

    /// The input written so far.
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }

    /// Append raw bytes (what [`Reader::rest`] returns).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// What [`Reader::byte`] reads back.
    pub fn byte(&mut self, value: u8) {
        self.bytes.push(value);
    }

    /// What [`Reader::u16`] reads back.
    pub fn u16(&mut self, value: u16) {
        self.raw(&value.to_le_bytes());
    }

    /// What [`Reader::u32`] reads back.
    pub fn u32(&mut self, value: u32) {
        self.raw(&value.to_le_bytes());
    }

    /// What [`Reader::u64`] reads back.
    pub fn u64(&mut self, value: u64) {
        self.raw(&value.to_le_bytes());
    }

    /// What [`Reader::flag`] reads back.
    pub fn flag(&mut self, value: bool) {
        self.byte(u8::from(value));
    }

    /// What [`Reader::below`] reads back, for `value < bound`.
    pub fn below(&mut self, value: usize, bound: usize) {
        assert!(value < bound.max(1), "{value} is not below {bound}");
        if bound <= 1 << 8 {
            self.byte(value as u8);
        } else if bound <= 1 << 16 {
            self.u16(value as u16);
        } else {
            self.u64(value as u64);
        }
    }

    /// What [`Reader::between`] reads back, for `low <= value <= high`.
    pub fn between(&mut self, value: usize, low: usize, high: usize) {
        self.below(value - low, high - low + 1);
    }

    /// What [`Reader::pick`] reads back: the position of `value` in `options`.
    pub fn pick<T: PartialEq + std::fmt::Debug>(&mut self, value: &T, options: &[T]) {
        let index = options
            .iter()
            .position(|option| option == value)
            .unwrap_or_else(|| panic!("{value:?} is not among the options {options:?}"));
        self.below(index, options.len());
    }
}

#[cfg(test)]
mod tests {
    use super::{Reader, Writer};

    #[test]
    fn a_reader_past_the_end_yields_zeros() {
        let mut reader = Reader::new(&[7]);
        assert_eq!(reader.byte(), 7);
        assert!(reader.is_exhausted());
        assert_eq!(reader.u64(), 0);
        assert_eq!(reader.below(5), 0);
        assert!(!reader.flag());
    }

    #[test]
    fn written_choices_read_back() {
        let mut writer = Writer::new();
        writer.below(200, 256);
        writer.below(1000, 70_000);
        writer.between(9, 3, 12);
        writer.flag(true);
        writer.u32(0xDEAD_BEEF);
        writer.pick(&'c', &['a', 'b', 'c']);
        let bytes = writer.finish();
        let mut reader = Reader::new(&bytes);
        assert_eq!(reader.below(256), 200);
        assert_eq!(reader.below(70_000), 1000);
        assert_eq!(reader.between(3, 12), 9);
        assert!(reader.flag());
        assert_eq!(reader.u32(), 0xDEAD_BEEF);
        assert_eq!(reader.pick(&['a', 'b', 'c']), 'c');
        assert!(reader.is_exhausted());
    }
}
