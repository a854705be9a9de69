//! GBNF grammars that steer decoding, as whisper.cpp's `--grammar` (its grammar sampling,
//! which came from llama.cpp): text tokens that no continuation of the grammar accepts get
//! their logits lowered by a penalty (soft: a likely enough token still wins), and the
//! tokens chosen advance the grammar, a window at a time.
//!
//! The syntax is whisper.cpp's `grammar-parser`: `name ::= alternatives` rules, one per line
//! (a line may continue after `|` or inside parentheses), string literals `"..."`, character
//! classes `[a-z0-9]` and `[^...]`, rule names, groups `( ... )`, the repeats `*`, `+` and
//! `?`, and `#` comments. Escapes: `\x41`, `\u00e9`, `\U0001f600`, `\t`, `\r`, `\n`, `\\`,
//! `\"`, `\[`, `\]`.
//!
//! The grammar is kept as whisper.cpp keeps it: each rule a flat list of elements whose
//! alternatives end in `Alt` or `End`; a parse position is a stack of positions in those
//! lists, and the parser holds every stack the text so far may have left it in.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::filters::{LogitFilter, TextMasks};
use crate::shortlist::Row;
use crate::tokenizer::Tokenizer;

/// One element of a rule, as whisper.cpp's `whisper_grammar_element`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
    /// End of the rule.
    End,
    /// End of an alternative; another follows.
    Alt,
    /// The rule of this id.
    RuleRef(u32),
    /// A character, or the first of a class (more follow as `CharAlt` / `RngUpper`).
    Char(u32),
    /// The first of a negated class.
    CharNot(u32),
    /// The upper end of a range whose lower end is the element before.
    RngUpper(u32),
    /// Another character (or range start) of the class.
    CharAlt(u32),
}

/// A GBNF grammar that does not parse, or cannot be run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrammarError {
    /// Line and column (from 1) where it went wrong, when the text itself is at fault.
    pub at: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for GrammarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, col)) => write!(f, "line {line}, column {col}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for GrammarError {}

/// A parsed grammar: its rules, by id, and their names.
#[derive(Clone, Debug)]
pub struct Grammar {
    rules: Vec<Vec<Elem>>,
    ids: HashMap<String, u32>,
}

impl Grammar {
    /// Parses GBNF text. Every rule referred to must be defined, and no rule may reach
    /// itself before reading a character (left recursion would never end).
    pub fn parse(src: &str) -> Result<Grammar, GrammarError> {
        let mut p = Parser {
            src: src.as_bytes(),
            pos: 0,
            depth: 0,
            ids: HashMap::new(),
            rules: Vec::new(),
        };
        p.space(true);
        while p.pos < p.src.len() {
            p.rule()?;
        }
        if p.ids.is_empty() {
            return Err(GrammarError {
                at: None,
                message: "the grammar has no rules".into(),
            });
        }
        let mut g = Grammar {
            rules: p.rules,
            ids: p.ids,
        };
        g.rules.resize(g.ids.len(), Vec::new());
        g.check()?;
        Ok(g)
    }

    /// The id of the rule named `name`.
    pub fn rule(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    /// Undefined rules and left recursion, each a clear error rather than a panic or a loop
    /// when decoding.
    fn check(&self) -> Result<(), GrammarError> {
        let name = |id: usize| {
            let found = self.ids.iter().find(|(_, &v)| v as usize == id);
            found.map_or_else(|| format!("#{id}"), |(k, _)| k.clone())
        };
        if let Some(id) = self.rules.iter().position(Vec::is_empty) {
            return Err(GrammarError {
                at: None,
                message: format!("rule `{}` is used but never defined", name(id)),
            });
        }
        // Which rules can match the empty text (a fixed point).
        let mut nullable = vec![false; self.rules.len()];
        loop {
            let mut changed = false;
            for (r, rule) in self.rules.iter().enumerate() {
                if !nullable[r] && alternatives(rule).any(|alt| self.all_nullable(alt, &nullable)) {
                    nullable[r] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // The rules each can enter before reading a character; a cycle there never ends.
        let first: Vec<Vec<usize>> = (self.rules.iter())
            .map(|rule| {
                let mut out = Vec::new();
                for alt in alternatives(rule) {
                    for e in alt {
                        match *e {
                            Elem::RuleRef(r) => {
                                out.push(r as usize);
                                if !nullable[r as usize] {
                                    break;
                                }
                            }
                            _ => break,
                        }
                    }
                }
                out
            })
            .collect();
        // Depth-first search for a cycle: 0 unseen, 1 on the path, 2 done.
        let mut state = vec![0u8; self.rules.len()];
        for start in 0..self.rules.len() {
            if state[start] != 0 {
                continue;
            }
            let mut path = vec![(start, 0usize)];
            state[start] = 1;
            while let Some(&mut (r, ref mut next)) = path.last_mut() {
                if let Some(&s) = first[r].get(*next) {
                    *next += 1;
                    match state[s] {
                        0 => {
                            state[s] = 1;
                            path.push((s, 0));
                        }
                        1 => {
                            return Err(GrammarError {
                                at: None,
                                message: format!(
                                    "rule `{}` is left-recursive (it can reach itself before \
                                     reading a character)",
                                    name(s)
                                ),
                            })
                        }
                        _ => {}
                    }
                } else {
                    state[r] = 2;
                    path.pop();
                }
            }
        }
        Ok(())
    }

    fn all_nullable(&self, alt: &[Elem], nullable: &[bool]) -> bool {
        alt.iter()
            .all(|e| matches!(*e, Elem::RuleRef(r) if nullable[r as usize]))
    }

    fn elem(&self, p: Pos) -> Elem {
        self.rules[p.rule as usize][p.index as usize]
    }

    /// Where each alternative of `rule` begins (an empty one begins at its `Alt`/`End`).
    fn alternative_starts(&self, rule: u32) -> impl Iterator<Item = Pos> + '_ {
        let alts = (self.rules[rule as usize].iter().enumerate())
            .filter(|(_, e)| **e == Elem::Alt)
            .map(|(i, _)| i + 1);
        std::iter::once(0).chain(alts).map(move |i| Pos {
            rule,
            index: i as u32,
        })
    }

    fn is_end(&self, p: Pos) -> bool {
        matches!(self.elem(p), Elem::End | Elem::Alt)
    }

    /// Walks the character class at `p`: whether it is positive (not `[^...]`), whether
    /// `hit` held for any of its ranges (a single character is a range of one), and the
    /// position after it.
    fn class(&self, p: Pos, mut hit: impl FnMut(u32, u32) -> bool) -> (bool, bool, Pos) {
        let positive = matches!(self.elem(p), Elem::Char(_));
        let (mut found, mut at) = (false, p);
        loop {
            let lo = match self.elem(at) {
                Elem::Char(c) | Elem::CharNot(c) | Elem::CharAlt(c) => c,
                e => unreachable!("a class starts at a character, not {e:?}"),
            };
            at.index += 1;
            let hi = match self.elem(at) {
                Elem::RngUpper(hi) => {
                    at.index += 1;
                    hi
                }
                _ => lo,
            };
            found |= hit(lo, hi);
            if !matches!(self.elem(at), Elem::CharAlt(_)) {
                return (positive, found, at);
            }
        }
    }

    /// Whether `chr` matches the character class at `p`, and the position after the class.
    fn match_char(&self, p: Pos, chr: u32) -> (bool, Pos) {
        let (positive, found, after) = self.class(p, |lo, hi| lo <= chr && chr <= hi);
        (found == positive, after)
    }

    /// Whether some completion of the partial UTF-8 sequence `partial` could match the class
    /// at `p` (for a negated class: whether none of its completions is excluded).
    fn match_partial(&self, p: Pos, partial: Partial) -> bool {
        let Partial { value, remain } = partial;
        // Invalid, or a 7-bit character split over two bytes (overlong).
        if remain < 0 || (remain == 1 && value < 2) {
            return false;
        }
        let shift = 6 * remain as u32;
        let mut low = value << shift;
        let high = low | ((1u32 << shift) - 1);
        if low == 0 {
            low = match remain {
                2 => 1 << 11,
                3 => 1 << 16,
                _ => low,
            };
        }
        let (positive, found, _) = self.class(p, |lo, hi| lo <= high && low <= hi);
        found == positive
    }

    /// Expands `stack` into the stacks that end at a character class (or are empty: the
    /// grammar is complete), appending them to `out`. False when it gave up, past
    /// [`MAX_STACKS`] readings or [`MAX_STEPS`] expansions: nested optional parts multiply
    /// the ways to read a text, and an explicit work list (not recursion) keeps even those
    /// off the call stack.
    fn advance(&self, stack: Stack, out: &mut Vec<Stack>) -> bool {
        let mut todo = vec![stack];
        let mut steps = 0;
        while let Some(mut stack) = todo.pop() {
            steps += 1;
            if steps > MAX_STEPS || out.len() > MAX_STACKS {
                return false;
            }
            let Some(top) = stack.pop() else {
                out.push(stack);
                continue;
            };
            match self.elem(top) {
                Elem::RuleRef(r) => {
                    let after = Pos {
                        index: top.index + 1,
                        ..top
                    };
                    for sub in self.alternative_starts(r) {
                        let mut next = stack.clone();
                        if !self.is_end(after) {
                            next.push(after);
                        }
                        if !self.is_end(sub) {
                            next.push(sub);
                        }
                        todo.push(next);
                    }
                }
                Elem::Char(_) | Elem::CharNot(_) => {
                    stack.push(top);
                    out.push(stack);
                }
                e => unreachable!("a stack never rests on {e:?}"),
            }
        }
        true
    }

    /// The start rule's stacks: one or more for each alternative (None: too many).
    fn start(&self, rule: u32) -> Option<Vec<Stack>> {
        let mut stacks = Vec::new();
        for at in self.alternative_starts(rule) {
            let stack = if self.is_end(at) { vec![] } else { vec![at] };
            if !self.advance(stack, &mut stacks) {
                return None;
            }
        }
        dedup(&mut stacks);
        Some(stacks)
    }

    /// The stacks after reading `chr` (none: the text left the grammar, or has more than
    /// [`MAX_STACKS`] readings, and is no longer steered).
    fn accept(&self, stacks: &[Stack], chr: u32) -> Vec<Stack> {
        let mut out = Vec::new();
        for stack in stacks {
            let Some(&top) = stack.last() else { continue };
            let (ok, after) = self.match_char(top, chr);
            if ok {
                let mut next = stack[..stack.len() - 1].to_vec();
                if !self.is_end(after) {
                    next.push(after);
                }
                if !self.advance(next, &mut out) {
                    return Vec::new();
                }
            }
        }
        dedup(&mut out);
        out
    }

    /// The candidates no stack accepts.
    fn reject<'a>(&self, stacks: &[Stack], candidates: Vec<Candidate<'a>>) -> Vec<Candidate<'a>> {
        if candidates.is_empty() || stacks.is_empty() {
            return Vec::new();
        }
        let mut rejects = self.reject_for_stack(&stacks[0], candidates);
        for stack in &stacks[1..] {
            rejects = self.reject_for_stack(stack, rejects);
        }
        rejects
    }

    fn reject_for_stack<'a>(
        &self,
        stack: &[Pos],
        candidates: Vec<Candidate<'a>>,
    ) -> Vec<Candidate<'a>> {
        let Some(&top) = stack.last() else {
            // Complete: only a token that adds nothing fits.
            return (candidates.into_iter())
                .filter(|c| c.at < c.chars.len() || c.partial.remain != 0)
                .collect();
        };
        let mut rejects = Vec::new();
        let mut next = Vec::new();
        for c in candidates {
            match c.chars.get(c.at) {
                None => {
                    if c.partial.remain != 0 && !self.match_partial(top, c.partial) {
                        rejects.push(c);
                    }
                }
                Some(&chr) if self.match_char(top, chr).0 => {
                    next.push(Candidate { at: c.at + 1, ..c })
                }
                Some(_) => rejects.push(c),
            }
        }
        let after = self.match_char(top, 0).1;
        let mut rest = stack[..stack.len() - 1].to_vec();
        if !self.is_end(after) {
            rest.push(after);
        }
        let mut stacks = Vec::new();
        if !self.advance(rest, &mut stacks) {
            return rejects; // too many readings to follow: what matched so far passes
        }
        dedup(&mut stacks);
        // Back to where this stack started, for the next stack to try.
        let deeper = self.reject(&stacks, next);
        rejects.extend(deeper.into_iter().map(|c| Candidate { at: c.at - 1, ..c }));
        rejects
    }
}

/// The alternatives of a rule, each without its `Alt`/`End`.
fn alternatives(rule: &[Elem]) -> impl Iterator<Item = &[Elem]> {
    let body = rule.strip_suffix(&[Elem::End]).unwrap_or(rule);
    body.split(|e| *e == Elem::Alt)
}

/// Readings of a text followed at most (realistic grammars have a handful).
const MAX_STACKS: usize = 4096;

/// Parentheses inside parentheses at most (the parser recurses into each).
const MAX_NESTING: usize = 256;

/// Rule expansions per character at most.
const MAX_STEPS: usize = 1 << 16;

/// Identical stacks are one (an ambiguous grammar would otherwise double them per character).
fn dedup(stacks: &mut Vec<Stack>) {
    stacks.sort_unstable();
    stacks.dedup();
}

/// A position in a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Pos {
    rule: u32,
    index: u32,
}

type Stack = Vec<Pos>;

/// The unfinished end of a UTF-8 sequence: its bits so far and the bytes still to come
/// (-1: invalid).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Partial {
    value: u32,
    remain: i32,
}

/// A token and how far into its characters the match has come.
#[derive(Clone, Copy, Debug)]
struct Candidate<'a> {
    id: u32,
    chars: &'a [u32],
    at: usize,
    partial: Partial,
}

/// Decodes `bytes` after `start`, which may end in an unfinished sequence (whisper.cpp's
/// `decode_utf8`, except that a NUL byte is a character here, not the end of the token). An
/// invalid byte gives no characters and an invalid state.
fn decode_utf8(bytes: &[u8], start: Partial) -> (Vec<u32>, Partial) {
    let mut chars = Vec::new();
    let (mut value, mut remain) = (start.value, start.remain);
    let mut i = 0;
    while i < bytes.len() && remain > 0 {
        if bytes[i] >> 6 != 2 {
            return (
                Vec::new(),
                Partial {
                    value: 0,
                    remain: -1,
                },
            );
        }
        value = (value << 6) + u32::from(bytes[i] & 0x3f);
        i += 1;
        remain -= 1;
    }
    if start.remain > 0 && remain == 0 {
        chars.push(value);
    }
    const LEN: [i32; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4];
    while i < bytes.len() {
        remain = LEN[usize::from(bytes[i] >> 4)] - 1;
        if remain < 0 {
            return (Vec::new(), Partial { value: 0, remain });
        }
        value = u32::from(bytes[i]) & ((1 << (7 - remain)) - 1);
        i += 1;
        while i < bytes.len() && remain > 0 {
            value = (value << 6) + u32::from(bytes[i] & 0x3f);
            i += 1;
            remain -= 1;
        }
        if remain == 0 {
            chars.push(value);
        }
    }
    // A finished character leaves no state (so that equal states compare equal).
    let partial = if remain == 0 {
        Partial::default()
    } else {
        Partial { value, remain }
    };
    (chars, partial)
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    /// Groups open around the current position.
    depth: usize,
    ids: HashMap<String, u32>,
    rules: Vec<Vec<Elem>>,
}

impl Parser<'_> {
    fn error(&self, message: impl Into<String>) -> GrammarError {
        let before = &self.src[..self.pos.min(self.src.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let col = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
        GrammarError {
            at: Some((line, col)),
            message: message.into(),
        }
    }

    fn peek(&self, ahead: usize) -> u8 {
        self.src.get(self.pos + ahead).copied().unwrap_or(0)
    }

    fn space(&mut self, newline_ok: bool) {
        loop {
            match self.peek(0) {
                b' ' | b'\t' => self.pos += 1,
                b'\r' | b'\n' if newline_ok => self.pos += 1,
                b'#' => {
                    while !matches!(self.peek(0), 0 | b'\r' | b'\n') {
                        self.pos += 1;
                    }
                }
                _ => return,
            }
        }
    }

    fn is_word(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'-'
    }

    fn name(&mut self) -> Result<String, GrammarError> {
        let start = self.pos;
        while Self::is_word(self.peek(0)) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("expected a rule name"));
        }
        Ok(String::from_utf8_lossy(&self.src[start..self.pos]).into_owned())
    }

    fn symbol(&mut self, name: &str) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry(name.to_string()).or_insert(next)
    }

    /// A fresh rule for a group or a repeat, named after the rule it is in.
    fn generated(&mut self, base: &str) -> u32 {
        let id = self.ids.len() as u32;
        self.ids.insert(format!("{base}_{id}"), id);
        id
    }

    fn add_rule(&mut self, id: u32, rule: Vec<Elem>) {
        let id = id as usize;
        if self.rules.len() <= id {
            self.rules.resize(id + 1, Vec::new());
        }
        self.rules[id] = rule;
    }

    fn hex(&mut self, digits: usize) -> Result<u32, GrammarError> {
        let mut value = 0u32;
        for _ in 0..digits {
            let d = (self.peek(0) as char).to_digit(16).ok_or_else(|| {
                self.error(format!(
                    "expected {digits} hexadecimal digits in the escape"
                ))
            })?;
            value = (value << 4) | d;
            self.pos += 1;
        }
        Ok(value)
    }

    /// One character of a literal or class, escapes read.
    fn char(&mut self) -> Result<u32, GrammarError> {
        match self.peek(0) {
            0 if self.pos >= self.src.len() => Err(self.error("unexpected end of the grammar")),
            b'\\' => {
                let e = self.peek(1);
                self.pos += 2;
                match e {
                    b'x' => self.hex(2),
                    b'u' => self.hex(4),
                    b'U' => self.hex(8),
                    b't' => Ok(u32::from(b'\t')),
                    b'r' => Ok(u32::from(b'\r')),
                    b'n' => Ok(u32::from(b'\n')),
                    b'\\' | b'"' | b'[' | b']' => Ok(u32::from(e)),
                    _ => {
                        self.pos -= 2;
                        Err(self.error("unknown escape"))
                    }
                }
            }
            _ => {
                // The source is a str: a whole character starts here.
                let rest = std::str::from_utf8(&self.src[self.pos..]).unwrap_or_default();
                let c = rest.chars().next().unwrap_or('\0');
                self.pos += c.len_utf8().max(1);
                Ok(u32::from(c))
            }
        }
    }

    fn sequence(
        &mut self,
        rule_name: &str,
        out: &mut Vec<Elem>,
        nested: bool,
    ) -> Result<(), GrammarError> {
        let mut last_start = out.len();
        while self.pos < self.src.len() {
            match self.peek(0) {
                b'"' => {
                    self.pos += 1;
                    last_start = out.len();
                    while self.peek(0) != b'"' {
                        let c = self.char()?;
                        out.push(Elem::Char(c));
                    }
                    self.pos += 1;
                    self.space(nested);
                }
                b'[' => {
                    self.pos += 1;
                    let negated = self.peek(0) == b'^';
                    if negated {
                        self.pos += 1;
                    }
                    last_start = out.len();
                    while self.peek(0) != b']' {
                        let c = self.char()?;
                        out.push(if last_start < out.len() {
                            Elem::CharAlt(c)
                        } else if negated {
                            Elem::CharNot(c)
                        } else {
                            Elem::Char(c)
                        });
                        if self.peek(0) == b'-' && self.peek(1) != b']' {
                            self.pos += 1;
                            let hi = self.char()?;
                            out.push(Elem::RngUpper(hi));
                        }
                    }
                    if last_start == out.len() {
                        return Err(self.error("an empty character class matches nothing"));
                    }
                    self.pos += 1;
                    self.space(nested);
                }
                b if Self::is_word(b) => {
                    let name = self.name()?;
                    let id = self.symbol(&name);
                    self.space(nested);
                    last_start = out.len();
                    out.push(Elem::RuleRef(id));
                }
                b'(' => {
                    if self.depth >= MAX_NESTING {
                        return Err(
                            self.error(format!("groups nested more than {MAX_NESTING} deep"))
                        );
                    }
                    self.pos += 1;
                    self.space(true);
                    let sub = self.generated(rule_name);
                    self.depth += 1;
                    self.alternates(rule_name, sub, true)?;
                    self.depth -= 1;
                    last_start = out.len();
                    out.push(Elem::RuleRef(sub));
                    if self.peek(0) != b')' {
                        return Err(self.error("expected `)`"));
                    }
                    self.pos += 1;
                    self.space(nested);
                }
                op @ (b'*' | b'+' | b'?') => {
                    if last_start == out.len() {
                        return Err(
                            self.error(format!("`{}` follows nothing to repeat", op as char))
                        );
                    }
                    // S* -> S' ::= S S' |    S+ -> S' ::= S S' | S    S? -> S' ::= S |
                    let sub = self.generated(rule_name);
                    let item = out.split_off(last_start);
                    let mut rule = item.clone();
                    if op != b'?' {
                        rule.push(Elem::RuleRef(sub));
                    }
                    rule.push(Elem::Alt);
                    if op == b'+' {
                        rule.extend_from_slice(&item);
                    }
                    rule.push(Elem::End);
                    self.add_rule(sub, rule);
                    out.push(Elem::RuleRef(sub));
                    self.pos += 1;
                    self.space(nested);
                }
                _ => break,
            }
        }
        Ok(())
    }

    fn alternates(&mut self, rule_name: &str, id: u32, nested: bool) -> Result<(), GrammarError> {
        let mut rule = Vec::new();
        self.sequence(rule_name, &mut rule, nested)?;
        while self.peek(0) == b'|' {
            rule.push(Elem::Alt);
            self.pos += 1;
            self.space(true);
            self.sequence(rule_name, &mut rule, nested)?;
        }
        rule.push(Elem::End);
        self.add_rule(id, rule);
        Ok(())
    }

    fn rule(&mut self) -> Result<(), GrammarError> {
        let name = self.name()?;
        self.space(false);
        let id = self.symbol(&name);
        if !self.src[self.pos..].starts_with(b"::=") {
            return Err(self.error("expected `::=`"));
        }
        self.pos += 3;
        self.space(true);
        self.alternates(&name, id, false)?;
        match self.peek(0) {
            b'\r' => self.pos += if self.peek(1) == b'\n' { 2 } else { 1 },
            b'\n' => self.pos += 1,
            _ if self.pos >= self.src.len() => {}
            _ => return Err(self.error("expected the end of the line")),
        }
        self.space(true);
        Ok(())
    }
}

/// Lowers the logits of the text tokens the grammar cannot accept next by `penalty`
/// (whisper.cpp's `grammar_penalty`, default 100), from the grammar's start rule at the
/// start of each window. Once the text has left the grammar (a penalized token still won),
/// nothing is lowered for the rest of the window; once the grammar is complete, every text
/// token is. `<|endoftext|>` and timestamps are never lowered (whisper.cpp's), so a window
/// can end early. Runs after the timestamp rules: it changes nothing they masked.
///
/// With text penalized, special tokens the model never means to say come up: the filter
/// masks those that are neither the end nor a timestamp (`<|notimestamps|>`, languages,
/// tasks: whisper.cpp masks them always), and without timestamps the timestamps too.
#[derive(Clone, Debug)]
pub struct GrammarFilter {
    grammar: Grammar,
    start: Vec<Stack>,
    penalty: f32,
    eot: u32,
    /// The special tokens masked: from after `<|endoftext|>` to here.
    specials_end: u32,
    /// Each text token's bytes, and its characters read from a clean start.
    bytes: Vec<Vec<u8>>,
    chars: Vec<(Vec<u32>, Partial)>,
    /// The rejected tokens of the parse states met so far: the hypotheses of a search, and
    /// the steps of a grammar such as `[^A-Z]*`, are mostly in a few states.
    seen: Memo<State, Arc<[u32]>>,
    /// The parse state after each text met so far (its text tokens).
    paths: Memo<Vec<u32>, State>,
}

/// A parse: its stacks, and the unfinished character.
type State = (Vec<Stack>, Partial);

/// What the filter remembers between calls (the filter is shared, `&self`).
type Memo<K, V> = Arc<Mutex<HashMap<K, V>>>;

/// States remembered at most; past that the memory starts again.
const SEEN_MAX: usize = 4096;

impl GrammarFilter {
    /// `rule`: the start rule's name (whisper.cpp's `--grammar-rule`; `root` by convention).
    /// `timestamps`: whether the text may hold timestamps.
    pub fn new(
        grammar: Grammar,
        rule: &str,
        penalty: f32,
        tok: &Tokenizer,
        timestamps: bool,
    ) -> Result<Self, GrammarError> {
        let id = grammar.rule(rule).ok_or_else(|| GrammarError {
            at: None,
            message: format!("the grammar has no rule `{rule}` to start from"),
        })?;
        let start = grammar.start(id).ok_or_else(|| GrammarError {
            at: None,
            message: format!("rule `{rule}` can start in too many ways to follow"),
        })?;
        let bytes: Vec<Vec<u8>> = (0..tok.eot()).map(|t| tok.decode_bytes(&[t])).collect();
        let chars = (bytes.iter())
            .map(|b| decode_utf8(b, Partial::default()))
            .collect();
        Ok(GrammarFilter {
            grammar,
            start,
            penalty,
            eot: tok.eot(),
            specials_end: if timestamps {
                tok.timestamp_begin()
            } else {
                tok.n_vocab() as u32
            },
            bytes,
            chars,
            seen: Arc::default(),
            paths: Arc::default(),
        })
    }

    /// The stacks, and the unfinished character, after the text tokens of `generated`.
    fn state(&self, generated: &[u32]) -> State {
        let text: Vec<u32> = generated
            .iter()
            .copied()
            .filter(|&t| t < self.eot)
            .collect();
        let paths = || self.paths.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = paths().get(&text) {
            return s.clone();
        }
        // A hypothesis is mostly one token past one met at the step before.
        let (mut stacks, mut partial, done) = match text.split_last() {
            Some((_, before)) => match paths().get(before) {
                Some((st, p)) => (st.clone(), *p, before.len()),
                None => (self.start.clone(), Partial::default(), 0),
            },
            None => (self.start.clone(), Partial::default(), 0),
        };
        for &t in &text[done..] {
            if stacks.is_empty() {
                break;
            }
            let (chars, after) = decode_utf8(&self.bytes[t as usize], partial);
            for c in chars {
                stacks = self.grammar.accept(&stacks, c);
            }
            partial = after;
        }
        let mut memo = paths();
        if memo.len() >= SEEN_MAX {
            memo.clear();
        }
        memo.insert(text, (stacks.clone(), partial));
        (stacks, partial)
    }

    /// The text tokens the grammar rejects after `generated`, in id order.
    pub fn rejected(&self, generated: &[u32]) -> Arc<[u32]> {
        let key = self.state(generated);
        let seen = || self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ids) = seen().get(&key) {
            return ids.clone();
        }
        let ids: Arc<[u32]> = self.reject_all(&key.0, key.1).into();
        let mut memo = seen();
        if memo.len() >= SEEN_MAX {
            memo.clear();
        }
        memo.insert(key, ids.clone());
        ids
    }

    fn reject_all(&self, stacks: &[Stack], partial: Partial) -> Vec<u32> {
        if stacks.is_empty() {
            return Vec::new();
        }
        let fresh;
        let chars = if partial == Partial::default() {
            &self.chars
        } else {
            fresh = (self.bytes.iter())
                .map(|b| decode_utf8(b, partial))
                .collect::<Vec<_>>();
            &fresh
        };
        let candidates = (chars.iter().zip(&self.bytes).enumerate())
            .filter(|(_, (_, b))| !b.is_empty())
            .map(|(id, ((chars, partial), _))| Candidate {
                id: id as u32,
                chars,
                at: 0,
                partial: *partial,
            })
            .collect();
        let mut ids: Vec<u32> = (self.grammar.reject(stacks, candidates).iter())
            .map(|c| c.id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

impl LogitFilter for GrammarFilter {
    fn apply(&self, row: &mut Row, generated: &[u32]) {
        row.mask_range(self.eot as usize + 1, self.specials_end as usize);
        let penalty = self.penalty;
        for &id in self.rejected(generated).iter() {
            row.update(id, |x| x - penalty);
        }
    }

    /// Any text token, by the grammar's state.
    fn text_masks(&self) -> TextMasks {
        TextMasks::Unknown
    }
}

#[cfg(test)]
#[path = "grammar_tests.rs"]
mod tests;
