//! PyTorch checkpoints as `torch.save` writes them (a zip since PyTorch 1.6): Hugging
//! Face `pytorch_model.bin` files and openai-whisper's `.pt` files.
//!
//! The zip holds `<archive>/data.pkl`, a pickle of the saved object, and one stored
//! (uncompressed) entry `<archive>/data/<key>` per tensor storage. The pickle is run by a
//! small stack machine that never executes anything: it understands the opcodes
//! `torch.save` emits, builds tensors from `torch._utils._rebuild_tensor_v2` calls
//! (views of the mapped zip, no copy), plain dicts, lists and tuples, and keeps every
//! other call or object as an inert record. Every length, offset and index is checked,
//! and the machine's memory is bounded by the pickle's length.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::Path;

use crate::storage::Reader;
use crate::{DType, FormatError, Result, Storage, TensorData};

/// A value of the pickle, as an index into [`Checkpoint`]'s arena: containers refer to
/// their items by index, so a memoized container is shared, as pickle shares it.
type Id = usize;

#[derive(Clone, Debug)]
enum Obj {
    /// None, a float, bytes: values sotto never reads.
    Opaque,
    Bool(bool),
    Int(i64),
    Str(String),
    Tuple(Vec<Id>),
    List(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    /// A `module.name` reference (`GLOBAL`), never resolved.
    Global(String, String),
    /// A tensor storage: its element type (`None`: one sotto does not read) and key.
    Storage(Option<DType>, String),
    /// A contiguous tensor over a storage.
    Tensor(Tensor),
    /// Any other call or object, inert, with the state BUILD gave it.
    Object {
        state: Option<Id>,
    },
}

#[derive(Clone, Debug)]
struct Tensor {
    dtype: Option<DType>,
    key: String,
    /// Offset into the storage, in elements.
    offset: usize,
    shape: Vec<usize>,
}

/// A loaded checkpoint: the pickle's values and the zip's storages.
pub struct Checkpoint {
    arena: Vec<Obj>,
    root: Id,
    /// Storage key → its bytes (a view of the file).
    storages: HashMap<String, Storage>,
    path: std::path::PathBuf,
}

/// Whether `bytes` start as a zip file (as every `torch.save` file since PyTorch 1.6 does).
pub fn is_zip(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04")
}

/// The magic number that starts PyTorch's legacy (pre-1.6, non-zip) format, pickled.
const LEGACY_MAGIC: &[u8] = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";

fn invalid(path: &Path, msg: impl Into<String>) -> FormatError {
    FormatError::Invalid {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

impl Checkpoint {
    /// Reads the checkpoint in `data` (`path` names it in errors).
    pub fn read(data: &Storage, path: &Path) -> Result<Checkpoint> {
        let bytes = data.as_bytes();
        if bytes.starts_with(LEGACY_MAGIC) {
            return Err(FormatError::Unsupported {
                path: path.to_path_buf(),
                msg: "PyTorch's legacy (pre-1.6) format; save it again with a current \
                      torch.save, or as safetensors"
                    .into(),
            });
        }
        if !is_zip(bytes) {
            return Err(invalid(path, "not a PyTorch checkpoint (no zip header)"));
        }
        let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| invalid(path, format!("bad zip: {e}")))?;
        let mut pickle = None;
        let mut storages = HashMap::new();
        for i in 0..zip.len() {
            let entry = zip
                .by_index_raw(i)
                .map_err(|e| invalid(path, format!("bad zip entry {i}: {e}")))?;
            let name = entry.name().to_string();
            let mut parts = name.splitn(2, '/');
            let (_archive, inner) = (parts.next(), parts.next().unwrap_or(""));
            let is_pickle = inner == "data.pkl";
            let key = inner.strip_prefix("data/").filter(|k| !k.contains('/'));
            if !is_pickle && key.is_none() {
                continue;
            }
            if entry.compression() != zip::CompressionMethod::Stored {
                return Err(invalid(
                    path,
                    format!("{name} is compressed; torch.save stores its entries"),
                ));
            }
            let start = usize::try_from(entry.data_start()).ok();
            let len = usize::try_from(entry.compressed_size()).ok();
            let range = start
                .zip(len)
                .and_then(|(s, n)| Some(s..s.checked_add(n)?))
                .filter(|r| r.end <= bytes.len());
            let view = range
                .and_then(|r| data.slice(r))
                .ok_or_else(|| invalid(path, format!("{name} lies outside the file")))?;
            match key {
                Some(k) => {
                    storages.insert(k.to_string(), view);
                }
                None if pickle.is_some() => {
                    return Err(invalid(path, "more than one data.pkl"));
                }
                None => pickle = Some(view),
            }
        }
        let pickle = pickle.ok_or_else(|| invalid(path, "no data.pkl in the zip"))?;
        let mut vm = Machine {
            arena: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            r: Reader::new(pickle.as_bytes(), path),
        };
        let root = vm.run()?;
        Ok(Checkpoint {
            arena: vm.arena,
            root,
            storages,
            path: path.to_path_buf(),
        })
    }

    /// The value reached from the root through dict keys `keys`.
    fn find(&self, keys: &[&str]) -> Option<Id> {
        let mut at = self.root;
        for key in keys {
            at = self.dict_items(at)?.iter().rev().find_map(|&(k, v)| {
                matches!(&self.arena[k], Obj::Str(s) if s == key).then_some(v)
            })?;
        }
        Some(at)
    }

    /// A dict's items (also an object whose state is a dict, as `nn.Module`s pickle).
    fn dict_items(&self, id: Id) -> Option<&[(Id, Id)]> {
        match &self.arena[id] {
            Obj::Dict(items) => Some(items),
            Obj::Object { state: Some(s), .. } => match &self.arena[*s] {
                Obj::Dict(items) => Some(items),
                _ => None,
            },
            _ => None,
        }
    }

    /// The integers of the dict at `keys` (openai-whisper's `dims`), by key.
    pub fn ints(&self, keys: &[&str]) -> Option<Vec<(String, i64)>> {
        let items = self.dict_items(self.find(keys)?)?;
        Some(
            items
                .iter()
                .filter_map(|&(k, v)| match (&self.arena[k], &self.arena[v]) {
                    (Obj::Str(k), Obj::Int(v)) => Some((k.clone(), *v)),
                    _ => None,
                })
                .collect(),
        )
    }

    /// Whether the root holds `keys`.
    pub fn has(&self, keys: &[&str]) -> bool {
        self.find(keys).is_some()
    }

    /// Every tensor reachable from the value at `keys` through dicts and objects' states,
    /// named by the dotted keys below it (`encoder.conv1.weight`), in pickle order; each a
    /// view of the file. A tensor of a type sotto does not read is an error only if it
    /// is asked for by a name `wanted` accepts.
    pub fn tensors(
        &self,
        keys: &[&str],
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, TensorData)>> {
        let start = self
            .find(keys)
            .ok_or_else(|| invalid(&self.path, format!("no {} in the pickle", keys.join("."))))?;
        let mut out = Vec::new();
        let mut seen = vec![false; self.arena.len()];
        // Depth first in pickle order, without recursion (a hostile pickle may nest deep).
        let mut todo = vec![(start, String::new())];
        while let Some((id, name)) = todo.pop() {
            // A tensor under two names is named twice (tied weights may be one object).
            if let Obj::Tensor(t) = &self.arena[id] {
                if wanted(&name) {
                    out.push((name.clone(), self.tensor_data(&name, t)?));
                }
                continue;
            }
            if std::mem::replace(&mut seen[id], true) {
                continue; // a container shared or in a cycle: walked once
            }
            let Some(items) = self.dict_items(id) else {
                continue;
            };
            for &(k, v) in items.iter().rev() {
                if let Obj::Str(k) = &self.arena[k] {
                    let child = if name.is_empty() {
                        k.clone()
                    } else {
                        format!("{name}.{k}")
                    };
                    todo.push((v, child));
                }
            }
        }
        Ok(out)
    }

    fn tensor_data(&self, name: &str, t: &Tensor) -> Result<TensorData> {
        let dtype = t.dtype.ok_or_else(|| FormatError::Unsupported {
            path: self.path.clone(),
            msg: format!("tensor {name} is not f32, f16 or bf16"),
        })?;
        let storage = self.storages.get(&t.key).ok_or_else(|| {
            invalid(
                &self.path,
                format!("tensor {name}: no storage data/{}", t.key),
            )
        })?;
        let size = dtype.block().1;
        let numel = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let range = numel
            .and_then(|n| Some((t.offset.checked_mul(size)?, n.checked_mul(size)?)))
            .and_then(|(s, n)| Some(s..s.checked_add(n)?))
            .filter(|r| r.end <= storage.len());
        let data = range.and_then(|r| storage.slice(r)).ok_or_else(|| {
            invalid(
                &self.path,
                format!(
                    "tensor {name} of shape {:?} at element {} overruns its storage of {} bytes",
                    t.shape,
                    t.offset,
                    storage.len()
                ),
            )
        })?;
        Ok(TensorData {
            dtype,
            shape: t.shape.clone(),
            data,
        })
    }
}

/// The pickle stack machine.
struct Machine<'a> {
    arena: Vec<Obj>,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: HashMap<u64, Id>,
    r: Reader<'a>,
}

/// The element type of a `torch.<Name>Storage` class.
fn storage_dtype(class: &str) -> Option<DType> {
    match class {
        "FloatStorage" => Some(DType::F32),
        "HalfStorage" => Some(DType::F16),
        "BFloat16Storage" => Some(DType::BF16),
        _ => None,
    }
}

impl Machine<'_> {
    fn bad(&self, msg: impl Into<String>) -> FormatError {
        self.r.invalid(format!(
            "data.pkl at offset {}: {}",
            self.r.pos(),
            msg.into()
        ))
    }

    fn push(&mut self, obj: Obj) {
        self.arena.push(obj);
        self.stack.push(self.arena.len() - 1);
    }

    fn pop(&mut self) -> Result<Id> {
        match self.stack.pop() {
            Some(id) if self.marks.last().is_none_or(|&m| self.stack.len() >= m) => Ok(id),
            _ => Err(self.bad("stack underflow")),
        }
    }

    fn top(&self) -> Result<Id> {
        match self.stack.last() {
            Some(&id) if self.marks.last().is_none_or(|&m| self.stack.len() > m) => Ok(id),
            _ => Err(self.bad("stack underflow")),
        }
    }

    /// The items pushed since the last MARK, which is dropped.
    fn pop_mark(&mut self) -> Result<Vec<Id>> {
        let m = self.marks.pop().ok_or_else(|| self.bad("no MARK"))?;
        Ok(self.stack.split_off(m))
    }

    fn string(&mut self, n: usize) -> Result<String> {
        let b = self.r.bytes(n, "string")?;
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| self.bad("string is not UTF-8"))
    }

    /// A GLOBAL's module or name: up to a newline, at most 256 bytes.
    fn line(&mut self) -> Result<String> {
        let mut out = Vec::new();
        for _ in 0..self.r.remaining().min(256) {
            match self.r.u8("line")? {
                b'\n' => return String::from_utf8(out).map_err(|_| self.bad("name is not UTF-8")),
                c => out.push(c),
            }
        }
        Err(self.bad("GLOBAL name without an end"))
    }

    fn len(&mut self, bytes: usize) -> Result<usize> {
        let v = match bytes {
            1 => u64::from(self.r.u8("length")?),
            4 => u64::from(self.r.u32("length")?),
            _ => {
                let lo = u64::from(self.r.u32("length")?);
                lo | (u64::from(self.r.u32("length")?) << 32)
            }
        };
        usize::try_from(v)
            .ok()
            .filter(|&n| n <= self.r.remaining())
            .ok_or_else(|| self.bad(format!("length {v} runs past the end")))
    }

    fn int(&self, id: Id) -> Option<i64> {
        match self.arena[id] {
            Obj::Int(v) => Some(v),
            Obj::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }

    fn usizes(&self, id: Id) -> Option<Vec<usize>> {
        match &self.arena[id] {
            Obj::Tuple(v) | Obj::List(v) => v
                .iter()
                .map(|&i| self.int(i).and_then(|x| usize::try_from(x).ok()))
                .collect(),
            _ => None,
        }
    }

    fn items(&self, id: Id) -> Option<&[Id]> {
        match &self.arena[id] {
            Obj::Tuple(v) | Obj::List(v) => Some(v),
            _ => None,
        }
    }

    /// `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`.
    fn rebuild_tensor(&self, args: Id) -> Result<Obj> {
        let a = self
            .items(args)
            .filter(|a| a.len() >= 4)
            .ok_or_else(|| self.bad("tensor rebuild without storage, offset, size, stride"))?;
        let (dtype, key) = match &self.arena[a[0]] {
            Obj::Storage(dtype, key) => (*dtype, key.clone()),
            _ => return Err(self.bad("tensor rebuild without a storage")),
        };
        let offset = self
            .int(a[1])
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| self.bad("tensor offset is not a count"))?;
        let (shape, stride) = self
            .usizes(a[2])
            .zip(self.usizes(a[3]))
            .filter(|(s, t)| s.len() == t.len())
            .ok_or_else(|| self.bad("tensor size and stride do not match"))?;
        // Row-major and dense (a dimension of size 1 may have any stride).
        let mut want = 1usize;
        for (&d, &s) in shape.iter().zip(&stride).rev() {
            if d != 1 && s != want {
                return Err(self.bad(format!(
                    "a tensor of shape {shape:?} has strides {stride:?}: not contiguous"
                )));
            }
            want = want.saturating_mul(d);
        }
        Ok(Obj::Tensor(Tensor {
            dtype,
            key,
            offset,
            shape,
        }))
    }

    /// REDUCE: `callable(*args)`, for the callables `torch.save` uses; any other is kept
    /// as an inert object. `Ok(id)`: an existing value; `Err(obj)`: a new one.
    fn reduce(&mut self, callable: Id, args: Id) -> Result<std::result::Result<Id, Obj>> {
        let name = match &self.arena[callable] {
            Obj::Global(m, n) => Some((m.as_str(), n.as_str())),
            _ => None,
        };
        Ok(Err(match name {
            Some(("torch._utils", "_rebuild_tensor_v2" | "_rebuild_tensor")) => {
                self.rebuild_tensor(args)?
            }
            Some(("torch._utils", "_rebuild_parameter" | "_rebuild_parameter_with_state")) => {
                let data = self
                    .items(args)
                    .and_then(|a| a.first().copied())
                    .ok_or_else(|| self.bad("parameter rebuild without its tensor"))?;
                return Ok(Ok(data));
            }
            Some(("collections", "OrderedDict")) => {
                // OrderedDict() or OrderedDict([(key, value), ...]).
                let mut items = Vec::new();
                if let Some(&list) = self.items(args).and_then(|a| a.first()) {
                    for &pair in self.items(list).unwrap_or(&[]) {
                        if let Some(&[k, v]) = self.items(pair) {
                            items.push((k, v));
                        }
                    }
                }
                Obj::Dict(items)
            }
            _ => Obj::Object { state: None },
        }))
    }

    fn run(&mut self) -> Result<Id> {
        loop {
            let op = self.r.u8("opcode")?;
            match op {
                0x80 => {
                    let v = self.r.u8("protocol")?;
                    if v > 5 {
                        return Err(self.bad(format!("pickle protocol {v}")));
                    }
                }
                0x95 => {
                    self.len(8)?; // FRAME: a hint only
                }
                b'.' => {
                    let top = self.pop()?;
                    return Ok(top);
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let t = self.top()?;
                    self.stack.push(t);
                }
                b'N' => self.push(Obj::Opaque),
                0x88 => self.push(Obj::Bool(true)),
                0x89 => self.push(Obj::Bool(false)),
                b'J' => {
                    let v = self.r.i32("int")?;
                    self.push(Obj::Int(v.into()));
                }
                b'K' => {
                    let v = self.r.u8("int")?;
                    self.push(Obj::Int(v.into()));
                }
                b'M' => {
                    let v = self.r.u16("int")?;
                    self.push(Obj::Int(v.into()));
                }
                0x8a => {
                    let n = self.len(1)?;
                    let b = self.r.bytes(n, "long")?;
                    if n > 8 {
                        return Err(self.bad(format!("a {n}-byte integer")));
                    }
                    let mut v = [if b.last().is_some_and(|&x| x & 0x80 != 0) {
                        0xff
                    } else {
                        0
                    }; 8];
                    v[..n].copy_from_slice(b);
                    self.push(Obj::Int(i64::from_le_bytes(v)));
                }
                b'G' => {
                    self.r.bytes(8, "float")?;
                    self.push(Obj::Opaque);
                }
                b'X' | 0x8c | 0x8d | b'U' | b'T' => {
                    let n = match op {
                        0x8c | b'U' => self.len(1)?,
                        0x8d => self.len(8)?,
                        _ => self.len(4)?,
                    };
                    let s = self.string(n)?;
                    self.push(Obj::Str(s));
                }
                b'C' | b'B' | 0x8e => {
                    let n = match op {
                        b'C' => self.len(1)?,
                        b'B' => self.len(4)?,
                        _ => self.len(8)?,
                    };
                    self.r.bytes(n, "bytes")?;
                    self.push(Obj::Opaque);
                }
                b')' => self.push(Obj::Tuple(Vec::new())),
                b']' => self.push(Obj::List(Vec::new())),
                b'}' => self.push(Obj::Dict(Vec::new())),
                0x8f => self.push(Obj::List(Vec::new())), // EMPTY_SET
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Obj::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.push(Obj::Tuple(items));
                }
                b'l' | 0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Obj::List(items));
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return Err(self.bad("DICT with an odd number of items"));
                    }
                    let pairs = items.chunks_exact(2).map(|p| (p[0], p[1])).collect();
                    self.push(Obj::Dict(pairs));
                }
                b'a' | b'e' | 0x90 => {
                    let items = if op == b'a' {
                        vec![self.pop()?]
                    } else {
                        self.pop_mark()?
                    };
                    let list = self.top()?;
                    match &mut self.arena[list] {
                        Obj::List(v) => v.extend(items),
                        _ => return Err(self.bad("APPEND to a non-list")),
                    }
                }
                b's' | b'u' => {
                    let items = if op == b's' {
                        let v = self.pop()?;
                        let k = self.pop()?;
                        vec![k, v]
                    } else {
                        self.pop_mark()?
                    };
                    if items.len() % 2 != 0 {
                        return Err(self.bad("SETITEMS with an odd number of items"));
                    }
                    let dict = self.top()?;
                    // A key set twice stays twice: lookups take the last, and a walk
                    // names both (which the caller refuses).
                    match &mut self.arena[dict] {
                        Obj::Dict(v) => v.extend(items.chunks_exact(2).map(|p| (p[0], p[1]))),
                        _ => return Err(self.bad("SETITEM on a non-dict")),
                    }
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.push(Obj::Global(module, name));
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (&self.arena[module], &self.arena[name]) {
                        (Obj::Str(m), Obj::Str(n)) => {
                            let g = Obj::Global(m.clone(), n.clone());
                            self.push(g);
                        }
                        _ => return Err(self.bad("STACK_GLOBAL of non-strings")),
                    }
                }
                b'q' | b'r' | 0x94 => {
                    let key = match op {
                        b'q' => u64::from(self.r.u8("memo key")?),
                        b'r' => u64::from(self.r.u32("memo key")?),
                        _ => self.memo.len() as u64,
                    };
                    let top = self.top()?;
                    self.memo.insert(key, top);
                }
                b'h' | b'j' => {
                    let key = match op {
                        b'h' => u64::from(self.r.u8("memo key")?),
                        _ => u64::from(self.r.u32("memo key")?),
                    };
                    let id = *self
                        .memo
                        .get(&key)
                        .ok_or_else(|| self.bad(format!("memo {key} is empty")))?;
                    self.stack.push(id);
                }
                b'Q' => {
                    // BINPERSID: ('storage', torch.<T>Storage, key, location, numel).
                    let pid = self.pop()?;
                    let storage = self.items(pid).and_then(|p| {
                        let class = match &self.arena[*p.get(1)?] {
                            Obj::Global(_, n) => n.clone(),
                            _ => return None,
                        };
                        match (&self.arena[*p.first()?], &self.arena[*p.get(2)?]) {
                            (Obj::Str(kind), Obj::Str(key)) if kind == "storage" => {
                                Some(Obj::Storage(storage_dtype(&class), key.clone()))
                            }
                            _ => None,
                        }
                    });
                    let storage =
                        storage.ok_or_else(|| self.bad("persistent id is not a storage"))?;
                    self.push(storage);
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    match self.reduce(callable, args)? {
                        Ok(id) => self.stack.push(id),
                        Err(obj) => self.push(obj),
                    }
                }
                b'b' => {
                    let state = self.pop()?;
                    let obj = self.top()?;
                    if let Obj::Object { state: s, .. } = &mut self.arena[obj] {
                        *s = Some(state);
                    }
                    // An OrderedDict's state (its `_metadata`) and the like: ignored.
                }
                _ => {
                    return Err(self.bad(format!("opcode 0x{op:02x} is not one torch.save writes")))
                }
            }
        }
    }
}

/// openai-whisper's checkpoint (what `whisper.load_model` reads, as
/// `~/.cache/whisper/<name>.pt`): `{"dims": {n_mels, n_vocab, …}, "model_state_dict":
/// {…}}`, its tensors named as whisper.cpp names them (whisper.cpp's converter kept
/// openai-whisper's names). The file has no tokenizer: the ordinary tokens are
/// openai-whisper's own ([`crate::tiktoken`]), English-only or multilingual by the
/// vocabulary size, as `whisper.tokenizer` chooses them.
pub fn load_openai(path: &Path) -> Result<crate::WhisperFile> {
    let data = Storage::map_file(path)?;
    let ckpt = Checkpoint::read(&data, path)?;
    if !ckpt.has(&["model_state_dict"]) {
        return Err(FormatError::Unsupported {
            path: path.to_path_buf(),
            msg: "a PyTorch checkpoint without openai-whisper's model_state_dict (a Hugging \
                  Face pytorch_model.bin needs its config.json beside it)"
                .into(),
        });
    }
    let dims = ckpt
        .ints(&["dims"])
        .ok_or_else(|| invalid(path, "no dims dict in the checkpoint"))?;
    let dim = |key: &str| -> Result<usize> {
        let v = dims.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v);
        v.and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| invalid(path, format!("dims has no count {key}")))
    };
    let hparams = crate::Hparams {
        n_vocab: dim("n_vocab")?,
        n_audio_ctx: dim("n_audio_ctx")?,
        n_audio_state: dim("n_audio_state")?,
        n_audio_head: dim("n_audio_head")?,
        n_audio_layer: dim("n_audio_layer")?,
        n_text_ctx: dim("n_text_ctx")?,
        n_text_state: dim("n_text_state")?,
        n_text_head: dim("n_text_head")?,
        n_text_layer: dim("n_text_layer")?,
        n_mels: dim("n_mels")?,
    };
    crate::names::check_hparams(path, &hparams)?;
    let mut tensors = std::collections::BTreeMap::new();
    for (name, t) in ckpt.tensors(&["model_state_dict"], |_| true)? {
        if tensors.insert(name.clone(), t).is_some() {
            return Err(invalid(path, format!("tensor {name} appears twice")));
        }
    }
    crate::names::check(path, &hparams, &tensors)?;
    // openai-whisper: a vocabulary of 51 865 or more is multilingual.
    let multilingual = hparams.n_vocab >= 51865;
    Ok(crate::WhisperFile {
        path: path.to_path_buf(),
        format: crate::SourceFormat::Torch,
        hparams,
        tensors,
        vocab: crate::tiktoken::ordinary_tokens(multilingual),
        mel_filters: None,
        config: crate::ModelConfig::default(),
    })
}
