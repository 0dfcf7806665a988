//! Tokenizer of the IR text format: positions, comments (`;` and `//`), strings and numbers.

use crate::error::{Error, Result};

/// A source position (1-based line and column, columns counted in characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

impl Pos {
    /// A parse error at this position.
    pub fn err(self, msg: impl Into<String>) -> Error {
        Error::Parse { line: self.line, column: self.column, msg: msg.into() }
    }
}

/// How a function label was written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    /// `@123`: a closure label.
    Number(String),
    /// `@name` or `@"any name"`: a named function (or main).
    Name(String),
}

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// `[A-Za-z_][A-Za-z0-9_.]*` (keywords, mnemonics, dtypes, enum names, `true`, `inf`, …).
    Ident(String),
    /// `%label`: a value reference or definition.
    Value(String),
    /// `@label`: a function reference.
    Func(Label),
    /// Decimal digits without `.` or exponent.
    Int(String),
    /// Decimal number with a fraction or an exponent.
    Float(String),
    /// `0x` followed by hex digits (the digits only).
    Hex(String),
    /// A double-quoted string, unescaped.
    Str(String),
    /// One of `= , : ( ) [ ] { } ? * -`.
    Punct(char),
    /// End of a line (not emitted inside brackets).
    Newline,
    /// End of input.
    Eof,
}

impl Tok {
    /// A short description for "expected …, found …" messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Value(s) => format!("`%{s}`"),
            Tok::Func(Label::Number(s)) => format!("`@{s}`"),
            Tok::Func(Label::Name(s)) => format!("`@{s}`"),
            Tok::Int(s) | Tok::Float(s) => format!("number `{s}`"),
            Tok::Hex(s) => format!("number `0x{s}`"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::Newline => "end of line".to_string(),
            Tok::Eof => "end of input".to_string(),
        }
    }
}

/// A token with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Where it starts.
    pub pos: Pos,
}

/// Whether `c` may start an identifier.
pub fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

/// Whether `c` may continue an identifier.
pub fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

/// Whether `s` can be written without quotes as an identifier.
pub fn is_plain_ident(s: &str) -> bool {
    let mut it = s.chars();
    matches!(it.next(), Some(c) if is_ident_start(c)) && it.all(is_ident_char)
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    column: usize,
}

impl Lexer<'_> {
    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn pos(&self) -> Pos {
        Pos { line: self.line, column: self.column }
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(c) = self.peek() {
            if !f(c) {
                break;
            }
            s.push(c);
            self.bump();
        }
        s
    }

    fn skip_to_eol(&mut self) {
        while let Some(c) = self.peek() {
            if c == '\n' {
                break;
            }
            self.bump();
        }
    }

    fn string(&mut self, start: Pos) -> Result<String> {
        // The opening quote has been consumed.
        let mut s = String::new();
        loop {
            let p = self.pos();
            match self.bump() {
                None | Some('\n') => return Err(start.err("unterminated string (expected a closing `\"`)")),
                Some('"') => return Ok(s),
                Some('\\') => {
                    let c = self.bump().ok_or_else(|| p.err("unterminated escape sequence"))?;
                    match c {
                        'n' => s.push('\n'),
                        't' => s.push('\t'),
                        'r' => s.push('\r'),
                        '0' => s.push('\0'),
                        '\\' => s.push('\\'),
                        '"' => s.push('"'),
                        '\'' => s.push('\''),
                        'u' => {
                            if self.bump() != Some('{') {
                                return Err(p.err("expected `{` after `\\u`"));
                            }
                            let hex = self.take_while(|c| c.is_ascii_hexdigit());
                            if self.bump() != Some('}') {
                                return Err(p.err("expected `}` closing a `\\u{…}` escape"));
                            }
                            let ch = u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| p.err(format!("invalid unicode escape `\\u{{{hex}}}`")))?;
                            s.push(ch);
                        }
                        other => return Err(p.err(format!("unknown escape sequence `\\{other}`"))),
                    }
                }
                Some(c) => s.push(c),
            }
        }
    }

    fn number(&mut self) -> Tok {
        // At a digit.
        let mut s = String::new();
        if self.peek() == Some('0') {
            s.push('0');
            self.bump();
            if matches!(self.peek(), Some('x') | Some('X')) {
                self.bump();
                return Tok::Hex(self.take_while(|c| c.is_ascii_hexdigit()));
            }
        }
        s.push_str(&self.take_while(|c| c.is_ascii_digit()));
        let mut float = false;
        if self.peek() == Some('.') {
            float = true;
            s.push('.');
            self.bump();
            s.push_str(&self.take_while(|c| c.is_ascii_digit()));
        }
        if matches!(self.peek(), Some('e') | Some('E')) {
            float = true;
            s.push('e');
            self.bump();
            if let Some(c @ ('+' | '-')) = self.peek() {
                s.push(c);
                self.bump();
            }
            s.push_str(&self.take_while(|c| c.is_ascii_digit()));
        }
        if float { Tok::Float(s) } else { Tok::Int(s) }
    }
}

/// Splits `text` into tokens. Newlines inside `(…)` and `[…]` are dropped so long literals may
/// span lines; comments run from `;` or `//` to the end of the line.
pub fn tokenize(text: &str) -> Result<Vec<Token>> {
    let mut lx = Lexer { chars: text.chars().peekable(), line: 1, column: 1 };
    let mut out = Vec::new();
    let mut depth = 0usize;
    loop {
        let pos = lx.pos();
        let Some(c) = lx.peek() else {
            out.push(Token { tok: Tok::Eof, pos });
            return Ok(out);
        };
        let tok = match c {
            '\n' => {
                lx.bump();
                if depth > 0 {
                    continue;
                }
                Tok::Newline
            }
            c if c.is_whitespace() => {
                lx.bump();
                continue;
            }
            ';' => {
                lx.skip_to_eol();
                continue;
            }
            '/' => {
                lx.bump();
                if lx.peek() != Some('/') {
                    return Err(pos.err("unexpected `/` (comments start with `//` or `;`)"));
                }
                lx.skip_to_eol();
                continue;
            }
            '"' => {
                lx.bump();
                Tok::Str(lx.string(pos)?)
            }
            '%' => {
                lx.bump();
                let s = lx.take_while(is_ident_char);
                if s.is_empty() {
                    return Err(pos.err("expected a value label (digits or a name) after `%`"));
                }
                Tok::Value(s)
            }
            '@' => {
                lx.bump();
                match lx.peek() {
                    Some('"') => {
                        let p = lx.pos();
                        lx.bump();
                        Tok::Func(Label::Name(lx.string(p)?))
                    }
                    Some(d) if d.is_ascii_digit() => Tok::Func(Label::Number(lx.take_while(|c| c.is_ascii_digit()))),
                    Some(d) if is_ident_start(d) => Tok::Func(Label::Name(lx.take_while(is_ident_char))),
                    _ => return Err(pos.err("expected a function label (name, number or string) after `@`")),
                }
            }
            c if c.is_ascii_digit() => lx.number(),
            c if is_ident_start(c) => Tok::Ident(lx.take_while(is_ident_char)),
            '(' | '[' => {
                lx.bump();
                depth += 1;
                Tok::Punct(c)
            }
            ')' | ']' => {
                lx.bump();
                depth = depth.saturating_sub(1);
                Tok::Punct(c)
            }
            '=' | ',' | ':' | '{' | '}' | '?' | '*' | '-' => {
                lx.bump();
                Tok::Punct(c)
            }
            other => return Err(pos.err(format!("unexpected character {other:?}"))),
        };
        out.push(Token { tok, pos });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn basic_tokens() {
        assert_eq!(
            toks("%4 = add %2, %3 : f32[2,3] ; comment\n"),
            vec![
                Tok::Value("4".into()),
                Tok::Punct('='),
                Tok::Ident("add".into()),
                Tok::Value("2".into()),
                Tok::Punct(','),
                Tok::Value("3".into()),
                Tok::Punct(':'),
                Tok::Ident("f32".into()),
                Tok::Punct('['),
                Tok::Int("2".into()),
                Tok::Punct(','),
                Tok::Int("3".into()),
                Tok::Punct(']'),
                Tok::Newline,
                Tok::Eof
            ]
        );
    }

    #[test]
    fn numbers_strings_labels() {
        assert_eq!(
            toks("1.5e-7 0x7fC0 -3 \"a\\\"b\\u{e9}\" @12 @\"x y\" @f.g // c"),
            vec![
                Tok::Float("1.5e-7".into()),
                Tok::Hex("7fC0".into()),
                Tok::Punct('-'),
                Tok::Int("3".into()),
                Tok::Str("a\"bé".into()),
                Tok::Func(Label::Number("12".into())),
                Tok::Func(Label::Name("x y".into())),
                Tok::Func(Label::Name("f.g".into())),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn newlines_inside_brackets_are_dropped() {
        assert_eq!(toks("[1,\n2]\n").len(), 7);
    }

    #[test]
    fn errors_have_positions() {
        assert_eq!(
            tokenize("  \"abc").unwrap_err(),
            Error::Parse { line: 1, column: 3, msg: "unterminated string (expected a closing `\"`)".into() }
        );
        assert!(matches!(tokenize("a\n $").unwrap_err(), Error::Parse { line: 2, column: 2, .. }));
    }
}
