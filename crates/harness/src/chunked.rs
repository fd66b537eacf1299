//! An append-only sequence kept in chunks, so that a push never moves what
//! is already there: the store behind an agent's log and the in-memory
//! store's logs.
//!
//! A `Vec` that doubles copies its whole contents at each doubling. For a
//! log of 20,000 events that is megabytes copied into freshly faulted
//! pages inside one ordinary write, so the step that happens to push past
//! the capacity pays for the whole history (measured: 200-670 µs against
//! 6 µs for its neighbours), and an agent resumed from a long log pays it
//! on its first write. Here a log shorter than 512 items is one `Vec`
//! (contiguous, with a `Vec`'s spare room: a parked child's log stays
//! small); from there on a full chunk is left where it is and the next push
//! starts a new one of 512, so no push copies more than 512 items at any
//! length. The
//! vector it starts from (a loaded log) is adopted as the first chunk
//! without a copy.

/// The room of every chunk after the first, and the length up to which
/// the first grows as a `Vec` does.
const CHUNK: usize = 512;

/// The room of the first chunk of a log that starts empty: five, so that
/// one doubling holds a one-turn child's whole log (its activation record,
/// its accepted prompt and a turn of seven events: nine). From four it
/// took two doublings, to room for 16, in the child's log and in the
/// memory store's copy alike; from five a log reaches a chunk in as many
/// doublings as from four.
const FIRST_CHUNK: usize = 5;

/// An append-only sequence in chunks; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Chunked<T> {
    /// Every chunk but the last is full (at its capacity).
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> From<Vec<T>> for Chunked<T> {
    /// Adopts `items` as the first chunk: nothing is copied, and pushes go
    /// into its spare capacity first.
    fn from(items: Vec<T>) -> Self {
        let len = items.len();
        let chunks = if items.capacity() == 0 {
            Vec::new()
        } else {
            vec![items]
        };
        Self { chunks, len }
    }
}

impl<T> Chunked<T> {
    /// How many items it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends `item` without moving any item already held.
    pub(crate) fn push(&mut self, item: T) {
        let single = self.chunks.len() == 1;
        match self.chunks.last_mut() {
            // Within capacity, so the chunk is not reallocated.
            Some(chunk) if chunk.len() < chunk.capacity() => chunk.push(item),
            // A short log is one `Vec` that doubles as usual, so it stays
            // contiguous and keeps no more spare room than a `Vec`; a
            // doubling copies fewer than `CHUNK` items, whatever the log,
            // and stops at a chunk's room (from five, a doubling would
            // pass it).
            Some(chunk) if single && chunk.capacity() < CHUNK => {
                let room = (2 * chunk.capacity()).min(CHUNK);
                chunk.reserve_exact(room - chunk.len());
                chunk.push(item);
            }
            _ => {
                let room = if self.chunks.is_empty() {
                    FIRST_CHUNK
                } else {
                    CHUNK
                };
                let mut chunk = Vec::with_capacity(room);
                chunk.push(item);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    /// Makes room for `extra` more items in a log still kept as one `Vec`
    /// (shorter than a chunk), so a batch appended next grows it at most
    /// once rather than doubling item by item. A log already in chunks is
    /// left as it is: its pushes never copy more than a chunk anyway.
    pub(crate) fn reserve(&mut self, extra: usize) {
        if extra == 0 {
            return;
        }
        match self.chunks.as_mut_slice() {
            [] => {
                self.chunks
                    .push(Vec::with_capacity(extra.clamp(FIRST_CHUNK, CHUNK)));
            }
            [only] if only.len() + extra > only.capacity() && only.capacity() < CHUNK => {
                // At least a doubling, as a push would, and never past a
                // chunk's room: the pushes beyond it start a chunk.
                let room = (only.len() + extra).max(2 * only.capacity()).min(CHUNK);
                only.reserve_exact(room - only.len());
            }
            _ => {}
        }
    }

    /// The items, oldest first (reversible).
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + Clone {
        self.chunks.iter().flatten()
    }

    /// The items from position `from` on as one borrowed slice, when they
    /// lie in a single chunk (always so when there are none); `None` when
    /// they span chunks.
    pub(crate) fn contiguous_from(&self, from: usize) -> Option<&[T]> {
        if from >= self.len {
            return Some(&[]);
        }
        let mut skip = from;
        for (index, chunk) in self.chunks.iter().enumerate() {
            if skip < chunk.len() {
                return (index + 1 == self.chunks.len()).then(|| &chunk[skip..]);
            }
            skip -= chunk.len();
        }
        None
    }

    /// The items from position `from` on (none when `from >= len`).
    pub(crate) fn iter_from(&self, from: usize) -> impl Iterator<Item = &T> {
        let mut skip = from;
        let mut first = self.chunks.len();
        for (index, chunk) in self.chunks.iter().enumerate() {
            if skip < chunk.len() {
                first = index;
                break;
            }
            skip -= chunk.len();
        }
        let rest = self.chunks.get(first..).unwrap_or_default();
        rest.iter().enumerate().flat_map(move |(index, chunk)| {
            let start = if index == 0 { skip } else { 0 };
            chunk.get(start..).unwrap_or_default()
        })
    }
}

impl<T: Clone> Chunked<T> {
    /// A contiguous copy of the first `count` items (all of them when
    /// `count >= len`).
    pub(crate) fn prefix_to_vec(&self, count: usize) -> Vec<T> {
        let count = count.min(self.len);
        let mut out = Vec::with_capacity(count);
        out.extend(self.iter().take(count).cloned());
        out
    }

    /// A contiguous copy of every item.
    pub(crate) fn to_vec(&self) -> Vec<T> {
        self.prefix_to_vec(self.len)
    }

    /// Appends a copy of every item of `items`.
    pub(crate) fn extend_from_slice(&mut self, items: &[T]) {
        self.reserve(items.len());
        for item in items {
            self.push(item.clone());
        }
    }
}

impl<'a, T> IntoIterator for &'a Chunked<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Flatten<std::slice::Iter<'a, Vec<T>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.chunks.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_a_log_is_a_chunk_long_a_push_never_moves_an_item_already_held() {
        let mut items = Chunked::from(Vec::with_capacity(3));
        for n in 0..(CHUNK as u32) {
            items.push(n);
        }
        let first: *const u32 = items.iter().next().unwrap();
        for n in (CHUNK as u32)..(CHUNK as u32 * 3) {
            items.push(n);
        }
        assert_eq!(items.iter().next().map(|n| n as *const u32), Some(first));
        assert_eq!(items.len(), CHUNK * 3);
        assert!(items.iter().copied().eq(0..CHUNK as u32 * 3));
    }

    #[test]
    fn a_short_log_keeps_little_spare_room_and_a_long_one_at_most_a_chunk() {
        let mut items = Chunked::default();
        for n in 0..10u32 {
            items.push(n);
            let room: usize = items.chunks.iter().map(Vec::capacity).sum();
            assert!(room <= (2 * items.len()).max(FIRST_CHUNK), "{room} for {n}");
        }
        for n in 10..(CHUNK as u32 * 4) {
            items.push(n);
        }
        let room: usize = items.chunks.iter().map(Vec::capacity).sum();
        assert!(room - items.len() < CHUNK, "{room} for {}", items.len());
        assert!(items.chunks.iter().all(|chunk| chunk.capacity() <= CHUNK));
    }

    #[test]
    fn a_reserved_batch_grows_a_short_log_once_and_never_past_a_chunk() {
        let mut items: Chunked<u32> = Chunked::default();
        items.reserve(0);
        assert!(items.chunks.is_empty(), "nothing to make room for");
        items.reserve(9);
        let first = items.chunks[0].capacity();
        assert!((9..=CHUNK).contains(&first), "{first}");
        items.extend_from_slice(&[1; 9]);
        assert_eq!(items.chunks[0].capacity(), first, "the batch fitted");
        // A batch past a chunk's room fills the first chunk to exactly a
        // chunk and goes on in chunks of their own.
        items.extend_from_slice(&vec![2; CHUNK + 5]);
        assert_eq!(items.len(), CHUNK + 14);
        assert_eq!(items.chunks[0].capacity(), CHUNK);
        assert!(items.chunks.iter().all(|chunk| chunk.capacity() <= CHUNK));
        assert!(
            items
                .iter()
                .copied()
                .eq(std::iter::repeat_n(1, 9).chain(std::iter::repeat_n(2, CHUNK + 5)))
        );
        // A log in chunks is left as it is.
        let chunks = items.chunks.len();
        items.reserve(10_000);
        assert_eq!(items.chunks.len(), chunks);
    }

    #[test]
    fn a_one_turn_childs_log_grows_once_and_keeps_little_spare_room() {
        // An activation record, the accepted prompt, then a turn's seven
        // events (here in two batches): nine events.
        let mut items: Chunked<u32> = Chunked::default();
        let mut rooms = Vec::new();
        for batch in [1, 1, 4, 3] {
            items.extend_from_slice(&vec![0; batch]);
            let room = items.chunks[0].capacity();
            if rooms.last() != Some(&room) {
                rooms.push(room);
            }
        }
        assert_eq!(items.len(), 9);
        assert_eq!(rooms.len(), 2, "grown more than once: {rooms:?}");
        assert!(rooms[1] <= 10, "{rooms:?}");
    }

    #[test]
    fn a_log_shorter_than_a_chunk_is_one_slice() {
        let mut items = Chunked::default();
        for n in 0..(CHUNK as u32) {
            items.push(n);
            assert_eq!(items.chunks.len(), 1);
            assert!(items.contiguous_from(0).is_some());
        }
        items.push(CHUNK as u32);
        assert_eq!(items.chunks.len(), 2);
        assert_eq!(items.contiguous_from(CHUNK), Some(&[CHUNK as u32][..]));
        assert_eq!(items.contiguous_from(0), None);
    }

    #[test]
    fn an_adopted_vector_is_not_copied_and_fills_its_spare_capacity_first() {
        let full = CHUNK as u32 + 10;
        let mut seed = Vec::with_capacity(full as usize);
        seed.extend(0u32..4);
        let address = seed.as_ptr();
        let mut items = Chunked::from(seed);
        for n in 4..full {
            items.push(n);
        }
        assert_eq!(items.chunks.len(), 1);
        assert_eq!(items.chunks[0].as_ptr(), address);
        items.push(full);
        assert_eq!(items.chunks.len(), 2);
        assert_eq!(items.chunks[0].as_ptr(), address);
        assert!(items.iter().copied().eq(0..=full));
    }

    #[test]
    fn iter_from_and_prefixes_agree_with_a_vector_at_every_position() {
        let mut items = Chunked::from((0u32..7).collect::<Vec<_>>());
        let mut plain: Vec<u32> = (0..7).collect();
        for n in 7..(CHUNK as u32 * 2 + 5) {
            items.push(n);
            plain.push(n);
        }
        for from in [
            0,
            1,
            6,
            7,
            8,
            CHUNK,
            CHUNK + 7,
            plain.len() - 1,
            plain.len(),
            plain.len() + 3,
        ] {
            let got: Vec<u32> = items.iter_from(from).copied().collect();
            assert_eq!(got, plain.get(from..).unwrap_or_default(), "from {from}");
            assert_eq!(
                items.prefix_to_vec(from),
                plain[..from.min(plain.len())],
                "prefix {from}"
            );
            // One slice exactly when the rest lies in the last chunk.
            let last = items.chunks.last().map_or(0, Vec::len);
            let in_last = from >= plain.len() - last;
            match items.contiguous_from(from) {
                Some(slice) => {
                    assert!(in_last, "from {from}");
                    assert_eq!(slice, plain.get(from..).unwrap_or_default());
                }
                None => assert!(!in_last, "from {from}"),
            }
        }
        assert_eq!(items.to_vec(), plain);
        assert!(items.iter().rev().copied().eq(plain.iter().rev().copied()));
    }

    #[test]
    fn empty_sequences_behave() {
        let mut items: Chunked<u8> = Chunked::from(Vec::new());
        assert_eq!(items.len(), 0);
        assert_eq!(items.iter().count(), 0);
        assert_eq!(items.iter_from(0).count(), 0);
        items.extend_from_slice(&[1, 2]);
        assert_eq!(items.to_vec(), [1, 2]);
        assert_eq!(Chunked::<u8>::default().to_vec(), Vec::<u8>::new());
    }
}
