"""Which DDL texts the MySQL sink replays: exactly one statement of a DDL kind.

A DDL's text comes from the data (a binlog QUERY event, a Kafka message, a storage-sink schema
file), so whoever can write that data chooses what runs downstream with the sink's rights. The
sink sends it on a connection without ``CLIENT_MULTI_STATEMENTS`` (the server then refuses a
second statement), and first reads it here the way the server's lexer does, refusing:

* more than one statement (a ``;`` outside strings, quoted identifiers and comments);
* a statement that is not CREATE / ALTER / DROP / RENAME / TRUNCATE of a table, database, index,
  view or sequence (or TiDB's RECOVER / FLASHBACK TABLE): ``SET``, ``LOAD DATA``, ``INSERT``,
  ``SELECT ... INTO OUTFILE``, ``GRANT``, ``CREATE USER`` / ``TRIGGER`` / ``PROCEDURE`` / ``EVENT``,
  ``LOCK TABLES`` ...;
* clauses that reach outside the server's own tables: ``INTO OUTFILE`` / ``DUMPFILE``,
  ``LOAD_FILE()``, ``DATA`` / ``INDEX DIRECTORY``, ``CONNECTION=`` and the engines that read
  files or other servers (CONNECT, FEDERATED, SPIDER).

Executable comments (``/*!NNNNN ... */``, MariaDB's ``/*M!NNNNNN ... */``) run or not by server
version, so the reading must hold whichever of them the server runs: the statement's kind (verb
and object) must stand before the first of them, a ``;`` inside one counts, a body must end at
the first ``*/`` (where a server skipping it ends it), and a clause keyword whose next token lies
across a comment boundary is refused.

This is a lexer and a reader of the leading keywords, not a full SQL parser: the server still
parses the statement, and anything this module lets through is one DDL statement.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UnsafeDDLError", "check_ddl", "tokenize"]

# MySQL's my_isspace for the ASCII range (sql_lex.cc skips exactly these between tokens).
_SPACE = frozenset(" \t\n\r\f\v")
_VERBS: dict[str, frozenset[str]] = {
    "CREATE": frozenset({"TABLE", "DATABASE", "SCHEMA", "INDEX", "VIEW", "SEQUENCE"}),
    "ALTER": frozenset({"TABLE", "DATABASE", "SCHEMA", "VIEW", "SEQUENCE"}),
    "DROP": frozenset({"TABLE", "TABLES", "DATABASE", "SCHEMA", "INDEX", "VIEW", "SEQUENCE"}),
    "RENAME": frozenset({"TABLE", "TABLES"}),
    "TRUNCATE": frozenset({"TABLE"}),
    "RECOVER": frozenset({"TABLE"}),  # TiDB's, replicated by TiCDC to a TiDB downstream
    "FLASHBACK": frozenset({"TABLE"}),  # TiDB's (FLASHBACK CLUSTER is not a table DDL)
}
# Words that may stand between the verb and the object (CREATE OR REPLACE TEMPORARY TABLE,
# CREATE UNIQUE INDEX, ALTER ONLINE IGNORE TABLE, DROP OFFLINE INDEX).
_MODIFIERS = frozenset({"OR", "REPLACE", "TEMPORARY", "ONLINE", "OFFLINE", "IGNORE", "UNIQUE", "FULLTEXT", "SPATIAL"})
_OUTSIDE_ENGINES = frozenset({"CONNECT", "FEDERATED", "FEDERATEDX", "SPIDER"})
# sql_mode words that make ".." an identifier (ANSI_QUOTES itself and the combination modes holding it).
_ANSI_QUOTES_MODES = frozenset({"ANSI_QUOTES", "ANSI", "DB2", "MAXDB", "MSSQL", "ORACLE", "POSTGRESQL"})
# Keyword pairs that write a file or place a table's files anywhere on the server.
_OUTSIDE_PAIRS = frozenset({("INTO", "OUTFILE"), ("INTO", "DUMPFILE"), ("DATA", "DIRECTORY"), ("INDEX", "DIRECTORY")})
# Keywords that start the clauses `_refuse_outside` looks at.
_CLAUSE_HEADS = frozenset({"INTO", "DATA", "INDEX", "LOAD_FILE", "CONNECTION", "ENGINE"})


class UnsafeDDLError(ValueError):
    """The text is not exactly one DDL statement the sink may run."""


@dataclass(frozen=True, slots=True)
class Token:
    """``kind``: word, string ('..', or ".." without ANSI_QUOTES), ident (`..`), punct (one character) or ``;``.

    ``segment`` counts executable-comment boundaries before the token: tokens of one segment are
    all present or all absent, whatever the server version.
    """

    kind: str
    text: str
    start: int
    end: int
    segment: int = 0

    @property
    def word(self) -> str | None:
        """The upper-cased word, for an unquoted word only (a quoted name is never a keyword)."""
        return self.text.upper() if self.kind == "word" else None


def tokenize(sql: str, sql_mode: str = "") -> list[Token]:
    """The tokens of ``sql`` as MySQL/MariaDB read it in a session with ``sql_mode``.

    Comments are dropped; ``/*!NNNNN ... */`` and MariaDB's ``/*M!NNNNNN ... */`` are code to the
    server (their body runs when the version matches), so their bodies are tokenized; other
    comments (``/* */``, ``#``, ``-- ``, TiDB's ``/*T! */``) are skipped. Under NO_BACKSLASH_ESCAPES
    a backslash does not escape a quote; under ANSI_QUOTES ``".."`` is an identifier, where it never does.
    """
    modes = {m.strip() for m in sql_mode.upper().split(",")}
    return _Lexer(sql, "NO_BACKSLASH_ESCAPES" not in modes, bool(modes & _ANSI_QUOTES_MODES)).run()


class _Lexer:
    def __init__(self, sql: str, backslash_escapes: bool, ansi_quotes: bool) -> None:
        self.sql = sql
        self.escapes = backslash_escapes
        self.ident_quotes = '`"' if ansi_quotes else "`"
        self.tokens: list[Token] = []
        self.in_executable = False  # inside /*! ... */: its */ ends it
        self.executable_end = -1  # where the first */ after /*! is: a server skipping the body ends there
        self.segment = 0

    def run(self) -> list[Token]:
        sql, i, n = self.sql, 0, len(self.sql)
        while i < n:
            ch = sql[i]
            if ch in _SPACE:
                i += 1
            elif sql.startswith("/*", i):
                i = self._comment(i)
            elif self.in_executable and sql.startswith("*/", i):
                if i != self.executable_end:
                    # A quote or a # / -- comment in the body moved its end: a server that runs the
                    # body and one that skips it (to the first */) would read different statements.
                    raise UnsafeDDLError(f"the executable comment ending at offset {i} has a */ inside its body")
                self.in_executable = False
                self.segment += 1
                i += 2
            elif ch == "#" or (sql.startswith("--", i) and (i + 2 == n or sql[i + 2] in _SPACE or sql[i + 2] < " ")):
                # MySQL: "-- " needs a space or control character after the dashes.
                end = sql.find("\n", i)
                i = n if end < 0 else end + 1
            elif ch in "'\"`":
                i = self._quoted(i, ch)
            elif ch.isalnum() or ch in "_$" or ch > "\x7f":
                i = self._word(i)
            else:
                self._add(";" if ch == ";" else "punct", i, i + 1)
                i += 1
        if self.in_executable:
            raise UnsafeDDLError("an executable comment /*! is not closed")
        return self.tokens

    def _comment(self, i: int) -> int:
        if self.in_executable:
            raise UnsafeDDLError(f"a comment inside an executable comment at offset {i}")
        sql = self.sql
        body = i + 2
        executable = sql.startswith("!", body) or sql.startswith("M!", body)
        if executable:
            body += 2 if sql[body] == "M" else 1
            while body < len(sql) and "0" <= sql[body] <= "9":
                body += 1  # the version: MySQL 5 digits, MariaDB 5 or 6; ASCII only (my_isdigit), so
                # a Unicode digit such as "５" starts the body as part of a word, as the server reads it
            self.executable_end = sql.find("*/", body)
            if self.executable_end < 0:
                raise UnsafeDDLError(f"an executable comment at offset {i} is not closed")
            self.in_executable = True
            self.segment += 1
            return body
        end = sql.find("*/", body)
        if end < 0:
            raise UnsafeDDLError(f"a comment at offset {i} is not closed")
        return end + 2

    def _quoted(self, i: int, quote: str) -> int:
        sql, j, n = self.sql, i + 1, len(self.sql)
        while j < n:
            ch = sql[j]
            if ch == "\\" and quote not in self.ident_quotes and self.escapes:
                j += 2
            elif ch == quote:
                if sql.startswith(quote, j + 1):  # a doubled quote stands for itself
                    j += 2
                    continue
                self._add("ident" if quote in self.ident_quotes else "string", i, j + 1)
                return j + 1
            else:
                j += 1
        raise UnsafeDDLError(f"a quoted {'identifier' if quote == '`' else 'string'} at offset {i} is not closed")

    def _word(self, i: int) -> int:
        sql, j, n = self.sql, i, len(self.sql)
        while j < n and (sql[j].isalnum() or sql[j] in "_$" or sql[j] > "\x7f"):
            j += 1
        self._add("word", i, j)
        return j

    def _add(self, kind: str, start: int, end: int) -> None:
        self.tokens.append(Token(kind, self.sql[start:end], start, end, self.segment))


def check_ddl(sql: str, sql_mode: str = "") -> str:
    """The kind of the one DDL statement in ``sql`` (``CREATE TABLE``...); `UnsafeDDLError` otherwise.

    ``sql_mode`` is the session's, which decides how quotes and backslashes read.
    """
    statements = _statements(tokenize(sql, sql_mode))
    if len(statements) != 1:
        raise UnsafeDDLError(f"the text holds {len(statements)} statements; a DDL event must hold exactly one")
    tokens = statements[0]
    kind = _kind(tokens)
    _refuse_outside(tokens)
    return kind


def _statements(tokens: list[Token]) -> list[list[Token]]:
    """Tokens split at ``;``; a trailing ``;`` (the server accepts one) ends the last statement."""
    statements: list[list[Token]] = [[]]
    for tok in tokens:
        if tok.kind == ";":
            statements.append([])
        else:
            statements[-1].append(tok)
    if len(statements) > 1 and not statements[-1]:
        statements.pop()
    return statements


def _kind(tokens: list[Token]) -> str:
    """``VERB OBJECT``, read from tokens before any executable comment (the same on every server)."""
    verb = tokens[0].word if tokens and tokens[0].segment == 0 else None
    if verb not in _VERBS:
        first = tokens[0].text if tokens else "(nothing)"
        raise UnsafeDDLError(
            f"{first[:40]!r} does not start a DDL statement (CREATE, ALTER, DROP, RENAME, TRUNCATE...)"
        )
    if verb == "TRUNCATE":
        return "TRUNCATE TABLE"  # TRUNCATE [TABLE] name: no other object follows TRUNCATE
    at = _object(tokens, 1)
    obj = tokens[at].word if at < len(tokens) else None
    if at < len(tokens) and tokens[at].segment != 0:
        raise UnsafeDDLError(f"the object of {verb} is inside an executable comment /*! */")
    if obj not in _VERBS[verb]:
        raise UnsafeDDLError(f"{verb} {obj or '(nothing)'} is not a DDL of a table, database, index, view or sequence")
    return f"{verb} {obj}"


def _object(tokens: list[Token], i: int) -> int:
    """Where the object keyword after the verb is, past modifiers and a view's ALGORITHM/DEFINER/SQL SECURITY."""
    while i < len(tokens):
        word = tokens[i].word
        if word in _MODIFIERS:
            i += 1
        elif word == "ALGORITHM":
            i = _skip_assignment(tokens, i + 1) + 1
        elif word == "DEFINER":
            i = _skip_user(tokens, _skip_assignment(tokens, i + 1))
        elif word == "SQL" and i + 1 < len(tokens) and tokens[i + 1].word == "SECURITY":
            i += 3
        else:
            return i
    return i


def _skip_assignment(tokens: list[Token], i: int) -> int:
    """Past ``=`` (required, as in the grammar): the index of the value."""
    if i >= len(tokens) or tokens[i].text != "=":
        raise UnsafeDDLError("ALGORITHM and DEFINER take '=' and a value")
    return i + 1


def _skip_user(tokens: list[Token], i: int) -> int:
    """Past ``user[@host]`` or ``CURRENT_USER[()]``: an unquoted host is the tokens written without spaces."""
    i += 1
    if i + 1 < len(tokens) and tokens[i].text == "(" and tokens[i + 1].text == ")":
        return i + 2
    if i + 1 < len(tokens) and tokens[i].text == "@":
        end = tokens[i + 1].end
        i += 2
        while i < len(tokens) and tokens[i].start == end and tokens[i].kind in ("word", "punct"):
            end = tokens[i].end
            i += 1
    return i


def _refuse_outside(tokens: list[Token]) -> None:
    """Refuse clauses that read or write files, or talk to other servers, from inside a DDL."""
    for i, tok in enumerate(tokens):
        word = tok.word
        if word not in _CLAUSE_HEADS:
            continue
        if word == "ENGINE":
            value = _after(tokens, i, 2) if _text(_after(tokens, i, 1)) == "=" else _after(tokens, i, 1)
            engine = _text(value).strip("`'\"").upper()
            if engine in _OUTSIDE_ENGINES:
                raise UnsafeDDLError(f"ENGINE={engine} reads files or other servers")
            continue
        nxt = _after(tokens, i, 1)
        after = nxt.word if nxt is not None else None
        if (word, after) in _OUTSIDE_PAIRS:
            raise UnsafeDDLError(f"{word} {after} reaches outside the database")
        if word == "LOAD_FILE" and _text(nxt) == "(":
            raise UnsafeDDLError("LOAD_FILE() reads a file on the server")
        if word == "CONNECTION" and nxt is not None and (nxt.text == "=" or nxt.kind == "string"):
            raise UnsafeDDLError("CONNECTION= makes a table of another server")


def _after(tokens: list[Token], i: int, k: int) -> Token | None:
    """The k-th token after ``tokens[i]`` when it is in the same segment; a comment boundary between is refused.

    Across a boundary the server's version decides which token follows, so no single answer is safe.
    """
    j = i + k
    if j >= len(tokens):
        return None
    if tokens[j].segment != tokens[i].segment:
        raise UnsafeDDLError(f"{tokens[i].text} is split from its clause by an executable comment /*! */")
    return tokens[j]


def _text(tok: Token | None) -> str:
    return tok.text if tok is not None else ""
