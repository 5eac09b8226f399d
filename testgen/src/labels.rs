//! The two label namespaces of a .ptt file: assembler labels (addresses, plus `org` and
//! the `section_<name>_{start,vstart,length}` labels) and packet labels (trace offsets).

use std::collections::BTreeMap;

/// Longest label name pttc accepts, in bytes, plus one.
pub const LABEL_MAX: usize = 256;

/// Why a packet label cannot be defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// The name is too long.
    #[error("label name is too long")]
    TooLong,
    /// An assembler or packet label of that name exists already.
    #[error("label name is not unique")]
    NotUnique,
}

/// All labels a .ptt file can refer to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels {
    asm: BTreeMap<String, u64>,
    packets: Vec<(String, u64)>,
}

impl Labels {
    /// Labels from the assembler: the code labels, `org`, and per section the
    /// `section_<name>_start` (file offset), `_vstart` and `_length` labels.
    ///
    /// `sections` holds (name, vstart, file offset, size).
    pub fn from_assembly(
        labels: BTreeMap<String, u64>,
        org: u64,
        sections: impl IntoIterator<Item = (String, u64, u64, u64)>,
    ) -> Self {
        let mut asm = labels;
        asm.entry("org".to_string()).or_insert(org);
        for (name, vstart, offset, size) in sections {
            asm.entry(format!("section_{name}_start")).or_insert(offset);
            asm.entry(format!("section_{name}_vstart"))
                .or_insert(vstart);
            asm.entry(format!("section_{name}_length")).or_insert(size);
        }
        Self {
            asm,
            packets: Vec::new(),
        }
    }

    /// The address of an assembler label.
    pub fn asm(&self, name: &str) -> Option<u64> {
        self.asm.get(name).copied()
    }

    /// The trace offset of a packet label (or `eos`).
    pub fn packet(&self, name: &str) -> Option<u64> {
        self.packets
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, v)| v)
    }

    /// Define a packet label; names are shared with the assembler labels.
    pub fn define_packet(&mut self, name: &str, offset: u64) -> Result<(), LabelError> {
        if self.asm.contains_key(name) || self.packet(name).is_some() {
            return Err(LabelError::NotUnique);
        }
        if name.len() >= LABEL_MAX {
            return Err(LabelError::TooLong);
        }
        self.packets.push((name.to_string(), offset));
        Ok(())
    }

    /// The packet labels in definition order.
    pub fn packets(&self) -> &[(String, u64)] {
        &self.packets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces() {
        let mut code = BTreeMap::new();
        code.insert("l1".to_string(), 0x1000);
        let mut l =
            Labels::from_assembly(code, 0x1000, [(".text".to_string(), 0x2000, 0x10, 0x20)]);
        assert_eq!(l.asm("l1"), Some(0x1000));
        assert_eq!(l.asm("org"), Some(0x1000));
        assert_eq!(l.asm("section_.text_start"), Some(0x10));
        assert_eq!(l.asm("section_.text_vstart"), Some(0x2000));
        assert_eq!(l.asm("section_.text_length"), Some(0x20));
        assert_eq!(l.define_packet("l1", 0), Err(LabelError::NotUnique));
        assert_eq!(l.define_packet("p1", 16), Ok(()));
        assert_eq!(l.define_packet("p1", 17), Err(LabelError::NotUnique));
        assert_eq!(
            l.define_packet(&"x".repeat(LABEL_MAX), 0),
            Err(LabelError::TooLong)
        );
        assert_eq!(l.packet("p1"), Some(16));
        assert_eq!(l.packet("l1"), None);
        assert_eq!(l.packets().len(), 1);
    }
}
