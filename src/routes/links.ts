/** A `Link` header to `url` (a request's path and query) with `param` set to `value`: the next page, `rel="next"`. */
export function linkTo (url: string, param: string, value: bigint): string {
  const next = new URL(url, 'http://placeholder')
  next.searchParams.set(param, value.toString())
  return `<${next.pathname}${next.search}>; rel="next"`
}
