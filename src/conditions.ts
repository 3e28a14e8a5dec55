// Conditional requests (RFC 9110 section 13) on a plant, whose ETag is its version: the position
// of its last change in the change log, written `"N"` (strong).
import { ApiError } from './errors.js'
import type { Conditions, Versions } from './store/store.js'

/** The ETag header of a plant at `version`. */
export function etagOf (version: bigint): string {
  return `"${version}"`
}

/**
 * One element of an entity-tag list (RFC 9110 8.8.3, 5.6.1) and the comma after it: optionally
 * `W/` and a quoted opaque tag (which may hold a comma), or nothing (an empty element). One run
 * of whitespace can be matched one way only: the expression never backtracks over it.
 */
const LIST_ELEMENT = /[ \t]*(?:(W\/)?"([\x21\x23-\x7e\x80-\xff]*)"[ \t]*)?(?:,|$)/y
const VERSION = /^[1-9]\d{0,18}$/

/** The entity-tags of a list, or undefined when it is not one. */
function entityTags (text: string): Array<{ weak: boolean, opaque: string }> | undefined {
  const tags: Array<{ weak: boolean, opaque: string }> = []
  for (LIST_ELEMENT.lastIndex = 0; LIST_ELEMENT.lastIndex < text.length;) {
    const match = LIST_ELEMENT.exec(text)
    if (match === null) return undefined
    if (match[2] !== undefined) tags.push({ weak: match[1] !== undefined, opaque: match[2] })
  }
  return tags
}

/**
 * An If-Match or If-None-Match header: '*', or its entity-tags; undefined without the header. A
 * malformed header is refused (400, its message showing `example`) rather than ignored: a write
 * sent with a condition must not go ahead without it.
 */
function conditionOf (header: string | undefined, name: 'If-Match' | 'If-None-Match', example = '"12"'): '*' | Array<{ weak: boolean, opaque: string }> | undefined {
  if (header === undefined) return undefined
  const text = header.trim()
  if (text === '*') return '*'
  // Empty list elements are allowed (RFC 9110 5.6.1); a list without an entity-tag is not.
  const tags = entityTags(text)
  if (tags === undefined || tags.length === 0) {
    throw new ApiError('invalidCondition', `The ${name} header must be "*" or a list of ETags such as ${example} in double quotes, not ${JSON.stringify(header.slice(0, 64))}.`)
  }
  return tags
}

/**
 * The versions an If-Match or If-None-Match header names: '*', or those of its entity-tags that
 * are versions of ours (weak ones only where `weak` comparison applies; any other tag matches no
 * plant). Undefined without the header; a malformed one is refused (400).
 */
export function versionsOf (header: string | undefined, name: 'If-Match' | 'If-None-Match', { weak }: { weak: boolean }): Versions | undefined {
  const condition = conditionOf(header, name)
  if (condition === undefined || condition === '*') return condition
  return condition.filter(tag => (!tag.weak || weak) && VERSION.test(tag.opaque)).map(tag => BigInt(tag.opaque))
}

/**
 * True when an If-None-Match header names the entity-tag `opaque` (by weak comparison, RFC 9110
 * 13.1.2) or is `*`: a GET of a representation the client holds answers 304. A malformed header
 * is refused (400), as on a plant.
 */
export function ifNoneMatchNames (header: string | undefined, opaque: string): boolean {
  const condition = conditionOf(header, 'If-None-Match', `W/"${opaque}"`)
  return condition === '*' || (condition !== undefined && condition.some(tag => tag.opaque === opaque))
}

/**
 * The preconditions a request's headers set (RFC 9110 13.1): If-Match compared strongly, so a weak
 * ETag never matches it; If-None-Match weakly.
 */
export function conditionsOf (headers: { 'if-match'?: string, 'if-none-match'?: string }): Conditions {
  return {
    ifMatch: versionsOf(headers['if-match'], 'If-Match', { weak: false }),
    ifNoneMatch: versionsOf(headers['if-none-match'], 'If-None-Match', { weak: true })
  }
}
