/**
 * JSON text indented as `JSON.stringify(JSON.parse(text), null, 2)` would indent it, without
 * parsing it: numbers stay as written (an int64 id beyond 2^53 is not rounded), strings whole,
 * escapes included. The /docs page runs it in the browser: its text is sent as it is compiled, so
 * it names nothing outside itself and declares no inner function.
 */
export function indentJson (text: string): string {
  let out = ''
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (inString) {
      out += c
      if (c === '\\') out += text[++i]
      else if (c === '"') inString = false
    } else if (c === '"') {
      out += c
      inString = true
    } else if ((c === '{' && text[i + 1] === '}') || (c === '[' && text[i + 1] === ']')) {
      out += c + text[++i]
    } else if (c === '{' || c === '[') {
      out += c + '\n' + '  '.repeat(++depth)
    } else if (c === '}' || c === ']') {
      out += '\n' + '  '.repeat(--depth) + c
    } else if (c === ',') {
      out += ',\n' + '  '.repeat(depth)
    } else if (c === ':') {
      out += ': '
    } else if (!/\s/.test(c)) {
      out += c
    }
  }
  return out
}
