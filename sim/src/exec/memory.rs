//! Code bytes of an execution, kept per 4 KiB page.

use pt_encoder::hash::IntMap;
use std::sync::Arc;

/// Granularity at which code bytes are captured and logged.
pub const PAGE_SIZE: u64 = 4096;

/// One captured page.
#[derive(Clone, Debug)]
struct Page {
    bytes: Arc<[u8]>,
    /// Bumped whenever the page's contents are replaced, so writers can tell
    /// which version they already logged.
    generation: u64,
}

/// Code bytes by page, as executed. Pages are whole (`PAGE_SIZE` bytes).
#[derive(Clone, Debug, Default)]
pub struct CodeMemory {
    pages: IntMap<u64, Page>,
    next_generation: u64,
    /// Bumped by every change (a page stored, replaced or removed).
    version: u64,
}

/// The page base of an address.
pub const fn page_base(addr: u64) -> u64 {
    addr & !(PAGE_SIZE - 1)
}

impl CodeMemory {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores (or replaces) the page at `base`. Returns `false` and stores
    /// nothing when `base` is not page aligned or `bytes` is not a whole page.
    /// Storing identical contents keeps the old generation.
    pub fn set_page(&mut self, base: u64, bytes: &[u8]) -> bool {
        if base % PAGE_SIZE != 0 || bytes.len() as u64 != PAGE_SIZE {
            return false;
        }
        if let Some(p) = self.pages.get(&base) {
            if &*p.bytes == bytes {
                return true;
            }
        }
        self.next_generation += 1;
        self.version += 1;
        self.pages.insert(
            base,
            Page {
                bytes: Arc::from(bytes),
                generation: self.next_generation,
            },
        );
        true
    }

    /// Removes the page at `base`, if present.
    pub fn remove_page(&mut self, base: u64) {
        if self.pages.remove(&base).is_some() {
            self.version += 1;
        }
    }

    /// A number that changes whenever any page does (stored, replaced,
    /// removed): what a reader checked of this memory holds while it stays.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The page containing `addr`, if captured.
    pub fn page(&self, addr: u64) -> Option<&[u8]> {
        self.pages.get(&page_base(addr)).map(|p| &*p.bytes)
    }

    /// The generation of the page at `base` (changes whenever its contents do).
    pub fn generation(&self, base: u64) -> Option<u64> {
        self.pages.get(&page_base(base)).map(|p| p.generation)
    }

    /// Copies up to `buf.len()` bytes starting at `addr`, stopping at the first
    /// page not captured. Returns how many bytes were copied.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            let a = addr.wrapping_add(done as u64);
            let Some(page) = self.page(a) else { break };
            let off = (a - page_base(a)) as usize;
            let n = (page.len() - off).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&page[off..off + n]);
            done += n;
        }
        done
    }

    /// Page bases in ascending order.
    pub fn page_bases(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.pages.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Number of captured pages.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether no page is captured.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_crosses_pages_and_stops_at_holes() {
        let mut m = CodeMemory::new();
        let a = vec![0xaa; PAGE_SIZE as usize];
        let b = vec![0xbb; PAGE_SIZE as usize];
        assert!(m.set_page(0x1000, &a));
        assert!(m.set_page(0x2000, &b));
        let mut buf = [0u8; 4];
        assert_eq!(m.read(0x1ffe, &mut buf), 4);
        assert_eq!(buf, [0xaa, 0xaa, 0xbb, 0xbb]);
        assert_eq!(m.read(0x2ffe, &mut buf), 2);
        assert_eq!(m.read(0x5000, &mut buf), 0);
    }

    #[test]
    fn rejects_partial_or_unaligned_pages() {
        let mut m = CodeMemory::new();
        assert!(!m.set_page(0x1001, &[0; PAGE_SIZE as usize]));
        assert!(!m.set_page(0x1000, &[0; 10]));
        assert!(m.is_empty());
    }

    #[test]
    fn generation_changes_only_with_contents() {
        let mut m = CodeMemory::new();
        let a = vec![1; PAGE_SIZE as usize];
        m.set_page(0x1000, &a);
        let g = m.generation(0x1000);
        m.set_page(0x1000, &a);
        assert_eq!(m.generation(0x1234), g);
        m.set_page(0x1000, &[2; PAGE_SIZE as usize]);
        assert_ne!(m.generation(0x1000), g);
    }
}
