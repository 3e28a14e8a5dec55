import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import type { FastifyPluginAsync } from 'fastify'
import { document, route } from '../contract.js'
import { ApiError } from '../errors.js'
import { indentJson } from './indent-json.js'
import { StaticFile } from './static-file.js'

// Swagger UI's start, in a file of its own so that the page needs no inline script. The document
// is the served one (relative to /docs, so a path prefix in front of the service keeps working);
// validatorUrl null: Swagger UI would otherwise send the document to validator.swagger.io.
// Swagger UI pretty-prints a JSON answer by parsing it, which rounds integers beyond 2^53 (ids are
// int64): an answer that holds a number of 16 digits or more is shown as its own text instead,
// indented without being parsed (src/routes/indent-json.ts).
const START = `${indentJson.toString()}
const exactNumbers = () => ({
  wrapComponents: {
    responseBody: (Original, system) => (props) => {
      const exact = typeof props.content === 'string' && /json/i.test(props.contentType || '') && /\\d{16}/.test(props.content)
      return system.React.createElement(Original, exact ? { ...props, contentType: 'text/plain', content: indentJson(props.content) } : props)
    }
  }
})
window.ui = SwaggerUIBundle({ url: 'openapi.json', dom_id: '#swagger-ui', validatorUrl: null, plugins: [exactNumbers] })
`

/** Only this service's own files, no inline script or style; data: for the icons in Swagger UI's CSS. */
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const IMMUTABLE = 'public, max-age=31536000, immutable'

const CSS = 'text/css; charset=utf-8'
const JS = 'text/javascript; charset=utf-8'

const escapeHtml = (text: string): string => text.replace(/[&<>"]/g, c => `&#${c.charCodeAt(0)};`)

/** The page and its files, each under a name that carries a hash of its content, so that it can be cached for good. */
function build (): { page: string, assets: Map<string, StaticFile> } {
  const assets = new Map<string, StaticFile>()
  const add = (file: string, type: string, bytes: Buffer): string => {
    const asset = new StaticFile(type, bytes, IMMUTABLE)
    const name = file.replace(/\.(\w+)$/, `.${asset.hash}.$1`)
    assets.set(name, asset)
    return name
  }
  const swaggerUi = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'))
  const css = add('swagger-ui.css', CSS, readFileSync(join(swaggerUi, 'swagger-ui.css')))
  const bundle = add('swagger-ui-bundle.js', JS, readFileSync(join(swaggerUi, 'swagger-ui-bundle.js')))
  const start = add('start.js', JS, Buffer.from(START))
  // The data: icon keeps the browser from asking for /favicon.ico, which is no route here.
  const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(String(document.info.title))} API reference</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="docs/${css}">
</head>
<body>
<noscript>This page needs JavaScript; the document itself is at <a href="openapi.json">/openapi.json</a>.</noscript>
<div id="swagger-ui"></div>
<script src="docs/${bundle}"></script>
<script src="docs/${start}"></script>
</body>
</html>
`
  return { page, assets }
}

let built: ReturnType<typeof build> | undefined
/** Read and hashed when first asked for, not at every start: 1.9 MB that most servers never send. */
const reference = (): ReturnType<typeof build> => (built ??= build())

/** GET /docs: the served document in Swagger UI, with every file from this service; no token. */
export const docs: FastifyPluginAsync = async (app) => {
  app.route({
    ...route('apiReference'),
    handler: async (_request, reply) => reply
      .headers({ 'content-security-policy': CSP, 'cache-control': 'no-cache', 'x-content-type-options': 'nosniff' })
      .type('text/html; charset=utf-8')
      .send(reference().page)
  })

  app.route<{ Params: { file: string } }>({
    ...route('apiReferenceFile'),
    handler: async (request, reply) => {
      // `/docs/` is the page's address with a slash, from where its relative links would not resolve.
      if (request.params.file === '') return reply.redirect('../docs', 301)
      const asset = reference().assets.get(request.params.file)
      if (asset === undefined) throw new ApiError('fileNotFound')
      return await asset.send(request, reply) // 1.7 MB of script is 0.46 MB gzipped
    }
  })
}
