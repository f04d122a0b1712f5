//! [`parse`]: MSCCL XML text to a [`Program`], refusing anything malformed with its line and
//! column.
//!
//! The XML itself is read by `roxmltree` (no DTDs, so no entity expansion); everything about
//! the text is bounded before any tree is built: at most [`MAX_BYTES`] of input and
//! [`MAX_NODES`] XML nodes, so a hostile input costs at most a few hundred megabytes and a
//! single pass. Then the tree is read the way the executors read it: `<algo>` holds `<gpu>`s,
//! which hold `<tb>`s, which hold `<step>`s; other elements and other attributes are ignored
//! (as the executors ignore them); a missing required attribute, a number that is not one, an
//! unknown step type, buffer, protocol or collective is an error naming where it is.
//!
//! Values are kept as written, so [`Program::check`](crate::Program::check) can say which step
//! uses a bad peer, offset or count instead of the parser refusing the file. Only sizes that
//! would make checking itself expensive are refused here (see [`MAX_CELLS`], [`MAX_CLOCKS`]).

use crate::error::MscclError;
use crate::program::{
    Buffer, Gpu, MscclCollective, Operand, Position, Program, Protocol, Step, StepKind, Threadblock,
};
use roxmltree::{Document, Node, ParsingOptions};

/// The longest input accepted, in bytes (the largest published schedule is under 2 MB).
pub const MAX_BYTES: usize = 32 << 20;

/// The most XML nodes (elements, text runs, comments) accepted.
pub const MAX_NODES: u32 = 4 << 20;

/// The most buffer chunks, over all ranks, a program may declare or imply: the checker keeps a
/// few words per chunk.
pub const MAX_CELLS: u64 = 1 << 23;

/// The largest `ngpus` accepted.
pub const MAX_WORLD: i64 = 1 << 12;

/// The most `steps × threadblocks of the busiest rank` accepted: the race check keeps one
/// clock entry per step and threadblock of a rank.
pub const MAX_CLOCKS: u64 = 1 << 26;

/// Parse one MSCCL algorithm (`<algo>` as the root element).
///
/// ```
/// let xml = r#"<algo name="copy" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2"
///                    coll="allgather" inplace="1">
///   <gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0">
///     <tb id="0" send="1" recv="1" chan="0">
///       <step s="0" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
///       <step s="1" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
///     </tb>
///   </gpu>
///   <gpu id="1" i_chunks="0" o_chunks="2" s_chunks="0">
///     <tb id="0" send="0" recv="0" chan="0">
///       <step s="0" type="s" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
///       <step s="1" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
///     </tb>
///   </gpu>
/// </algo>"#;
/// let program = ruccl_msccl::parse(xml)?;
/// assert_eq!(program.world(), 2);
/// assert_eq!(program.step_count(), 4);
///
/// let error = ruccl_msccl::parse("<algo ngpus=\"two\"/>").unwrap_err();
/// assert_eq!(error.position().map(|p| p.line), Some(1));
/// # Ok::<(), ruccl_msccl::MscclError>(())
/// ```
pub fn parse(xml: &str) -> Result<Program, MscclError> {
    if xml.len() > MAX_BYTES {
        return Err(MscclError::TooLarge {
            position: None,
            what: format!("{} bytes of input", xml.len()),
            limit: format!("{MAX_BYTES} bytes"),
        });
    }
    let options = ParsingOptions {
        allow_dtd: false,
        nodes_limit: MAX_NODES,
        ..ParsingOptions::default()
    };
    let document = Document::parse_with_options(xml, options).map_err(|error| {
        let position = error.pos();
        MscclError::Syntax {
            position: Position {
                line: position.row,
                column: position.col,
            },
            message: error.to_string(),
        }
    })?;
    let reader = Reader::new(xml);
    let root = document.root_element();
    if root.tag_name().name() != "algo" {
        return Err(reader.format(
            &root,
            format!(
                "the root element is <{}>, expected <algo>",
                root.tag_name().name()
            ),
        ));
    }
    let program = reader.algo(&root)?;
    check_size(&program)?;
    Ok(program)
}

/// Reads elements and attributes with positions: byte offsets become lines and columns through
/// a table of line starts (one binary search each), not a scan from the start of the text.
struct Reader<'t> {
    text: &'t str,
    line_starts: Vec<usize>,
}

impl<'t> Reader<'t> {
    fn new(text: &'t str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(index, _)| index + 1))
            .collect();
        Reader { text, line_starts }
    }

    fn position_at(&self, offset: usize) -> Position {
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let start = self
            .line_starts
            .get(line.wrapping_sub(1))
            .copied()
            .unwrap_or(0);
        let column = self
            .text
            .get(start..offset)
            .map_or(0, |prefix| prefix.chars().count());
        Position {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column + 1).unwrap_or(u32::MAX),
        }
    }

    fn position(&self, node: &Node<'_, '_>) -> Position {
        self.position_at(node.range().start)
    }

    fn format(&self, node: &Node<'_, '_>, message: String) -> MscclError {
        MscclError::Format {
            position: self.position(node),
            message,
        }
    }

    /// The value of a required attribute, or an error at the element.
    fn text<'a>(&self, node: &Node<'a, '_>, name: &str) -> Result<&'a str, MscclError> {
        node.attribute(name).ok_or_else(|| {
            self.format(
                node,
                format!("<{}> lacks the attribute {name}", node.tag_name().name()),
            )
        })
    }

    /// A required integer attribute: optional sign, decimal digits, nothing else.
    fn integer(&self, node: &Node<'_, '_>, name: &str) -> Result<i64, MscclError> {
        let value = self.text(node, name)?;
        self.number(node, name, value)
    }

    /// An optional integer attribute.
    fn optional_integer(&self, node: &Node<'_, '_>, name: &str) -> Result<Option<i64>, MscclError> {
        node.attribute(name)
            .map(|value| self.number(node, name, value))
            .transpose()
    }

    fn number(&self, node: &Node<'_, '_>, name: &str, value: &str) -> Result<i64, MscclError> {
        let digits = value.strip_prefix(['-', '+']).unwrap_or(value);
        let parsed = if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            None
        } else {
            value.parse::<i64>().ok()
        };
        parsed.ok_or_else(|| {
            let position = node
                .attributes()
                .find(|attribute| attribute.name() == name)
                .map_or_else(
                    || self.position(node),
                    |attribute| self.position_at(attribute.range_value().start),
                );
            MscclError::Format {
                position,
                message: format!(
                    "<{}> attribute {name}=\"{value}\" is not an integer",
                    node.tag_name().name()
                ),
            }
        })
    }

    /// The element children with tag `name`, in order; other elements are ignored, as the
    /// executors ignore them.
    fn children<'a, 'i>(
        node: &Node<'a, 'i>,
        name: &'static str,
    ) -> impl Iterator<Item = Node<'a, 'i>> {
        node.children()
            .filter(move |child| child.is_element() && child.tag_name().name() == name)
    }

    fn algo(&self, node: &Node<'_, '_>) -> Result<Program, MscclError> {
        let coll = self.text(node, "coll")?;
        let collective = MscclCollective::from_name(coll).ok_or_else(|| {
            self.format(
                node,
                format!(
                    "coll=\"{coll}\" is no collective an MSCCL executor runs (allreduce, allgather, reduce_scatter, reducescatter, alltoall, broadcast, reduce, gather, scatter, custom, send, recv, alltoallv)"
                ),
            )
        })?;
        let proto = self.text(node, "proto")?;
        let protocol = Protocol::from_name(proto).ok_or_else(|| {
            self.format(
                node,
                format!("proto=\"{proto}\" is not Simple, LL or LL128"),
            )
        })?;
        let world = self.integer(node, "ngpus")?;
        if !(1..=MAX_WORLD).contains(&world) {
            return Err(self.format(
                node,
                format!("ngpus=\"{world}\" is not between 1 and {MAX_WORLD}"),
            ));
        }
        let chunks = self.integer(node, "nchunksperloop")?;
        if chunks < 1 {
            return Err(self.format(
                node,
                format!("nchunksperloop=\"{chunks}\" must be at least 1"),
            ));
        }
        let gpus = Self::children(node, "gpu")
            .map(|gpu| self.gpu(&gpu))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Program {
            name: node.attribute("name").map(str::to_owned),
            collective,
            coll: coll.to_owned(),
            world,
            chunks,
            channels: self.integer(node, "nchannels")?,
            protocol,
            inplace: self.integer(node, "inplace")?,
            outofplace: self.optional_integer(node, "outofplace")?,
            redop: node.attribute("redop").map(str::to_owned),
            gpus,
            position: self.position(node),
        })
    }

    fn gpu(&self, node: &Node<'_, '_>) -> Result<Gpu, MscclError> {
        let threadblocks = Self::children(node, "tb")
            .map(|tb| self.threadblock(&tb))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Gpu {
            id: self.integer(node, "id")?,
            input_chunks: self.integer(node, "i_chunks")?,
            output_chunks: self.integer(node, "o_chunks")?,
            scratch_chunks: self.integer(node, "s_chunks")?,
            threadblocks,
            position: self.position(node),
        })
    }

    fn threadblock(&self, node: &Node<'_, '_>) -> Result<Threadblock, MscclError> {
        let steps = Self::children(node, "step")
            .map(|step| self.step(&step))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Threadblock {
            id: self.integer(node, "id")?,
            send: self.integer(node, "send")?,
            recv: self.integer(node, "recv")?,
            channel: self.integer(node, "chan")?,
            steps,
            position: self.position(node),
        })
    }

    fn step(&self, node: &Node<'_, '_>) -> Result<Step, MscclError> {
        let kind_name = self.text(node, "type")?;
        let kind = StepKind::from_name(kind_name).ok_or_else(|| {
            self.format(
                node,
                format!(
                    "type=\"{kind_name}\" is no instruction the executors run (s, r, rcs, rrs, rrc, rrcs, cpy, re, nop)"
                ),
            )
        })?;
        Ok(Step {
            s: self.integer(node, "s")?,
            kind,
            src: self.operand(node, "srcbuf", "srcoff")?,
            dst: self.operand(node, "dstbuf", "dstoff")?,
            count: self.integer(node, "cnt")?,
            depid: self.integer(node, "depid")?,
            deps: self.integer(node, "deps")?,
            hasdep: self.integer(node, "hasdep")?,
            position: self.position(node),
        })
    }

    fn operand(
        &self,
        node: &Node<'_, '_>,
        buffer: &str,
        offset: &str,
    ) -> Result<Operand, MscclError> {
        let letter = self.text(node, buffer)?;
        let parsed = Buffer::from_letter(letter).ok_or_else(|| {
            self.format(
                node,
                format!("{buffer}=\"{letter}\" is not a buffer (i, o or s)"),
            )
        })?;
        Ok(Operand {
            buffer: parsed,
            offset: self.integer(node, offset)?,
        })
    }
}

/// Refuse programs whose buffers, over all ranks, exceed [`MAX_CELLS`] chunks.
fn check_size(program: &Program) -> Result<(), MscclError> {
    let world = program.world.unsigned_abs();
    let chunks = program.chunks.unsigned_abs();
    let (input, output) = program.collective.buffer_chunks(world, chunks);
    let mut total = world.saturating_mul(input.saturating_add(output));
    for gpu in &program.gpus {
        for declared in [gpu.input_chunks, gpu.output_chunks, gpu.scratch_chunks] {
            total = total.saturating_add(declared.max(0).unsigned_abs());
        }
    }
    let steps = program.step_count() as u64;
    let widest = program
        .gpus
        .iter()
        .map(|gpu| gpu.threadblocks.len() as u64)
        .max()
        .unwrap_or(0);
    if steps.saturating_mul(widest) > MAX_CLOCKS {
        return Err(MscclError::TooLarge {
            position: Some(program.position),
            what: format!("{steps} steps × {widest} threadblocks on one rank"),
            limit: format!("{MAX_CLOCKS}"),
        });
    }
    if total > MAX_CELLS {
        return Err(MscclError::TooLarge {
            position: Some(program.position),
            what: format!(
                "{world} ranks × {chunks} chunks per loop (and the declared chunks) make {total} buffer chunks"
            ),
            limit: format!("{MAX_CELLS} chunks"),
        });
    }
    Ok(())
}
